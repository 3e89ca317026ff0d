#!/usr/bin/python3
"""A Llama model on tiktoken's o200k_base, end to end (tests/cli_tokenize_tests.cmake).

  llama_o200k_end_to_end.py EXE WORK_DIR SOURCE_DIR MPIEXEC...

Tokenizes two fortune files with `tptrain tokenize --tokenizer o200k_base`, trains
input/llama-o200k-tiny.toml (model.vocab_size = 200019) on 2 tensor-parallel ranks, then checks:
  * the shards are version 2 (uint32 ids, some above 65535) and record 200019 ids;
  * the loss falls from about ln 200019 = 12.2;
  * eval's bits per byte against the formula computed here, independently of tptrain: every
    target token's bytes from the rank file itself (base64 per line), the specials as their
    text: bits/byte = eval_loss * tokens / (ln 2 * bytes);
  * generate prints UTF-8 text in the corpus's script: the untrained model's samples are spread
    over o200k_base's 200019 ids, most of them not English; the trained one's are the corpus's
    words (and the KV cache prints the full forward's text).
Prints what it checks; exits 1 on the first mismatch, 77 (skipped) without the rank file or
the corpus.
"""
import base64
import json
import math
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_script import fail, json_line, run  # noqa: E402

exe, work, src = sys.argv[1], sys.argv[2], sys.argv[3]
mpi = sys.argv[4:]
ranks_file = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ["HOME"], ".cache"), "tptrain",
                          "tiktoken", "o200k_base.tiktoken")
corpus = [os.path.join("/usr/share/games/fortunes", f) for f in ("art", "computers")]
if not os.path.isfile(ranks_file):
    print(f"{ranks_file} is missing (jobs/fetch-tiktoken-ranks.sh): skipped")
    sys.exit(77)
if not all(os.path.isfile(f) for f in corpus):
    print(f"{corpus} are not installed (Debian: fortunes, jobs/setup-deps.sh): skipped")
    sys.exit(77)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
VOCAB, SPECIALS = 200019, {199999: b"<|endoftext|>", 200018: b"<|endofprompt|>"}


def read_shard(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] != 20240520 or header[1] != 2:
            fail(f"{path}: header {header[:4]}, expected llm.c's magic and version 2")
        if header[3] != VOCAB:
            fail(f"{path}: records {header[3]} ids, expected {VOCAB}")
        return struct.unpack(f"<{header[2]}I", f.read(4 * header[2]))


shards = os.path.join(work, "shards")
run([exe, "tokenize", *corpus, "--out", shards, "--tokenizer", "o200k_base", "--valid-tokens", "4096"])
train_tokens = read_shard(os.path.join(shards, "train_000000.bin"))
valid_tokens = read_shard(os.path.join(shards, "valid_000000.bin"))
print(f"shards: {len(train_tokens)} train and {len(valid_tokens)} valid tokens, largest id {max(train_tokens)}")
if max(train_tokens) <= 65535:
    fail("no id above 65535: the shards do not exercise uint32 tokens")

deck = os.path.join(src, "input", "llama-o200k-tiny.toml")
steps, windows, S = 60, 8, 64
sets = ["--set", f"data.train={shards}/train_000000.bin", "--set", f"data.valid={shards}/valid_000000.bin",
        "--set", f"run.dir={work}/run", "--set", f"checkpoint.dir={work}/ck", "--set", f"training.steps={steps}",
        "--set", "training.log_interval=1", "--set", "training.eval_interval=0", "--set", "optimizer.warmup_steps=5",
        "--set", f"checkpoint.interval={steps}"]


def sample(checkpoint, flags=()):
    p = run(mpi + ["-n", "2", exe, "generate", deck, *sets, "--checkpoint", checkpoint, "--prompt", "The", "--tokens",
                   "48", "--temperature", "0.7", "--seed", "5", "--ignore-eos", *flags])
    text = p.stdout.decode("utf-8")  # raises on anything but UTF-8
    # The sample, without the line that says how fast the checkpoint was read.
    return "\n".join(l for l in text.split("\n") if not l.startswith("checkpoint "))


corpus_words = set()
for path in corpus:
    with open(path, encoding="utf-8", errors="replace") as f:
        corpus_words.update(w.lower() for w in f.read().split() if w.isalpha())


def known_words(text):
    """The share of the sample's alphabetic words that occur in the corpus: readable text."""
    words = [w.lower() for w in text.split() if w.isalpha()]
    return sum(w in corpus_words for w in words) / max(1, len(words))


def english(text):
    """The share of the text's non-space characters that are ASCII: the fortunes are English."""
    chars = [c for c in text if not c.isspace()]
    return sum(c.isascii() for c in chars) / max(1, len(chars))


run(mpi + ["-n", "2", exe, "train", deck, *sets, "--set", "training.steps=1", "--set", "optimizer.lr=1e-9",
           "--set", "optimizer.min_lr=1e-10", "--set", "optimizer.warmup_steps=0", "--set", f"run.dir={work}/run0",
           "--set", f"checkpoint.dir={work}/ck0", "--set", "checkpoint.interval=1"])
untrained = sample(os.path.join(work, "ck0", "step_00000001.h5"))
run(mpi + ["-n", "2", exe, "train", deck, *sets])
losses = [json.loads(l)["loss"] for l in open(os.path.join(work, "run", "metrics.jsonl")) if '"loss"' in l]
print(f"loss: step 1 {losses[0]:.3f} (ln {VOCAB} = {math.log(VOCAB):.3f}), step {steps} {losses[-1]:.3f}")
if abs(losses[0] - math.log(VOCAB)) > 1.0 or losses[-1] > losses[0] - 3.0:
    fail(f"the loss did not fall from about ln {VOCAB}: {losses}")
ck = os.path.join(work, "ck", f"step_{steps:08d}.h5")

# eval against the formula, with the targets' bytes counted from the rank file
got = json_line(run(mpi + ["-n", "2", exe, "eval", deck, *sets, "--checkpoint", ck, "--windows",
                           str(windows)]).stdout.decode())
length = dict((r, len(b)) for r, b in SPECIALS.items())
with open(ranks_file, "rb") as f:
    for line in f:
        token, rank = line.split()
        length[int(rank)] = len(base64.b64decode(token))
targets = [valid_tokens[j * S + t + 1] for j in range(windows) for t in range(S)]
nbytes = sum(length[t] for t in targets)
want = got["eval_loss"] * len(targets) / (math.log(2) * nbytes)
print(f"eval: loss {got['eval_loss']}, {len(targets)} targets of {nbytes} bytes: bits/byte {got['bits_per_byte']}, "
      f"formula {want}")
if got["tokens"] != len(targets) or got["bytes"] != nbytes:
    fail(f"tokens/bytes {got['tokens']}/{got['bytes']}, counted {len(targets)}/{nbytes}")
if abs(got["bits_per_byte"] - want) > 1e-7 * want:
    fail(f"bits per byte {got['bits_per_byte']} != {want}")

# generate: readable text, the KV cache's equal to the full forward's
trained = sample(ck)
full = sample(ck, ["--no-kv-cache"])
if full != trained:
    fail(f"the KV cache's text differs from the full forward's:\n{trained!r}\n{full!r}")
for name, text in (("untrained", untrained), ("trained", trained)):
    print(f"{name} ({english(text):.0%} ASCII, {known_words(text):.0%} of its words in the corpus): {text!r}")
if len(trained) <= len("The") + 8:
    fail("nothing generated")
if english(trained) < 0.9 or known_words(trained) < 0.6 or known_words(untrained) > 0.4:
    fail("the trained model's sample is not the corpus's words, or the untrained one's already is")
print("ok")
