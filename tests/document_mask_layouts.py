#!/usr/bin/python3
"""Packed documents across layouts, end to end (tests/cli_generate_tests.cmake).

  document_mask_layouts.py EXE WORK_DIR SOURCE_DIR MPIEXEC...

Tokenizes 300 of Debian's fortunes with the gpt2 tokenizer (every fortune a document opened by
<|endoftext|>), trains a tiny model for 5 steps with data.document_mask and
data.reset_positions on 1 rank, on pipeline 2, interleaved pipeline 2 x 2, tensor 2 with
sequence parallelism, data 2 and context 2 and 4 (ring attention: documents cross the chunks),
and checks:
  * every layout's losses and eval loss equal the single rank's (relative 1e-6: the reductions
    sum in another order);
  * without the keys the losses differ (the masks change what a token sees);
  * eval of the masked run's checkpoint under pipeline 2 and under context 2 prints the run's last
    eval loss; generate under context 2 is refused with a clear error;
  * generate with the KV cache on the masked model prints the text of --no-kv-cache past an
    <|endoftext|> in the prompt (--ignore-eos), where a new document starts.
Prints what it checks; exits 1 on the first mismatch. Exit 77 (skipped) without the vocabulary
or the fortunes.
"""
import json
import os
import shutil
import subprocess
import sys

exe, work, src = sys.argv[1], sys.argv[2], sys.argv[3]
mpi = sys.argv[4:]
vocab_dir = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ["HOME"], ".cache"), "tptrain", "gpt2")
if not os.path.isfile(os.path.join(vocab_dir, "encoder.json")):
    print(f"GPT-2's vocabulary is not in {vocab_dir}: skipped")
    sys.exit(77)
corpus = [os.path.join("/usr/share/games/fortunes", f) for f in ("art", "computers")]
if not all(os.path.isfile(f) for f in corpus):
    print(f"{corpus} are not installed (Debian: fortunes, jobs/setup-deps.sh): skipped")
    sys.exit(77)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)


def run(args):
    p = subprocess.run(args, capture_output=True, timeout=240)
    if p.returncode != 0:
        sys.exit(f"FAILED ({p.returncode}): {' '.join(args)}\n{p.stdout.decode(errors='replace')}\n"
                 f"{p.stderr.decode(errors='replace')}")
    return p.stdout.decode(errors="replace")


def fail(message):
    print("MISMATCH:", message)
    sys.exit(1)


# One document per fortune (tokenize opens each file with <|endoftext|>): a 64-token sequence
# then holds the tail of one and a few whole ones.
documents = []
for path in corpus:
    with open(path, encoding="utf-8", errors="replace") as f:
        for i, text in enumerate(f.read().split("\n%\n")[:150]):
            documents.append(os.path.join(work, f"{os.path.basename(path)}_{i:03d}.txt"))
            with open(documents[-1], "w") as d:
                d.write(text + "\n")
run([exe, "tokenize", *documents, "--out", os.path.join(work, "shards"), "--tokenizer", "gpt2", "--valid-tokens", "4096"])
deck = os.path.join(work, "docs.toml")
with open(deck, "w") as f:
    f.write("""
[model]
layers = 4
hidden = 32
heads = 4
seq_length = 64
vocab_size = 50257
[training]
global_batch = 4
micro_batch = 2
steps = 5
log_interval = 1
eval_interval = 5
eval_windows = 4
[optimizer]
warmup_steps = 1
lr = 1e-2
[data]
train = "shards/train_000000.bin"
valid = "shards/valid_000000.bin"
tokenizer = "gpt2"
[checkpoint]
resume = false
""")


def losses(name, ranks, *sets, masks=True):
    keys = ["--set", "data.document_mask=true", "--set", "data.reset_positions=true"] if masks else []
    for s in sets:
        keys += ["--set", s]
    out = os.path.join(work, name)
    run(mpi + ["-n", str(ranks), exe, "train", deck, "--set", f"run.dir={out}", "--set",
               f"checkpoint.dir={out}/ck", *keys])
    with open(os.path.join(out, "metrics.jsonl")) as f:
        lines = [json.loads(l) for l in f]
    train = [l["loss"] for l in lines if "loss" in l]
    evals = [l["eval_loss"] for l in lines if "eval_loss" in l]
    if len(train) != 5 or len(evals) != 1:
        fail(f"{name}: expected 5 losses and 1 eval loss, got {train} and {evals}")
    return train + evals


one = losses("one", 1)
print("1 rank:", one)
for name, ranks, sets in [("pipeline", 2, ["parallel.pipeline=2"]),
                          ("interleaved", 2, ["parallel.pipeline=2", "parallel.virtual_stages=2"]),
                          ("tensor", 2, ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
                          ("data", 2, ["parallel.data=2"]),
                          ("context", 2, ["parallel.context=2"]),
                          ("context 4", 4, ["parallel.context=4"])]:
    got = losses(name, ranks, *sets)
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, one))
    print(f"{name}: relative difference {worst:.2e}")
    if worst > 1e-6:
        fail(f"{name} gave {got}, 1 rank {one}")
plain = losses("plain", 1, masks=False)
if abs(plain[0] - one[0]) < 1e-4 * abs(one[0]):
    fail(f"the losses without the masks {plain} are those with them {one}")
print("without the masks:", plain)

ck = os.path.join(work, "one", "ck", "step_00000005.h5")
masks = ["--set", "data.document_mask=true", "--set", "data.reset_positions=true"]
for layout in ("pipeline", "context"):
    lines = [l for l in run(mpi + ["-n", "2", exe, "eval", deck, "--checkpoint", ck, "--windows", "4", "--set",
                                   f"parallel.{layout}=2", *masks]).splitlines() if l.startswith("{")]
    evaluated = json.loads(lines[-1])["eval_loss"]
    if abs(evaluated - one[-1]) > 1e-6 * abs(one[-1]):
        fail(f"eval under {layout} 2 gave {evaluated}, the run's eval {one[-1]}")
    print(f"eval under {layout} 2:", evaluated)
p = subprocess.run(mpi + ["-n", "2", exe, "generate", deck, "--checkpoint", ck, "--prompt", "Art", "--set",
                          "parallel.context=2"], capture_output=True, timeout=240)
said = p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")
if p.returncode == 0 or "generate runs without context parallelism" not in said:
    fail(f"generate under context 2 was not refused clearly (exit {p.returncode}):\n{said}")
print("generate under context 2: refused")

prompt = "Art is long.<|endoftext|>A computer"
texts = []
for cache in ([], ["--no-kv-cache"]):
    out = run(mpi + ["-n", "1", exe, "generate", deck, "--checkpoint", ck, "--prompt", prompt, "--tokens", "12",
                     "--ignore-eos", *cache, *masks])
    texts.append(out[out.index("Art is long."):])  # the sample (the lines before it time the load)
if texts[0] != texts[1]:
    fail(f"generate with the KV cache printed {texts[0]!r}, without it {texts[1]!r}")
print("generate past <|endoftext|>, with and without the cache:", texts[0].strip()[-60:])
print("ok")
