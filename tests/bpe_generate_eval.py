#!/usr/bin/python3
"""GPT-2 BPE end to end for `tptrain eval` and `tptrain generate` (tests/cli_generate_tests.cmake).

  bpe_generate_eval.py EXE WORK_DIR SOURCE_DIR MPIEXEC...

Tokenizes two of the repository's text files with the gpt2 tokenizer, trains a tiny model on 2
ranks, then checks:
  * eval's bits per byte against the formula computed here, independently of tptrain: the
    valid shard read as llm.c's format, every target token's bytes from GPT-2's encoder.json
    through GPT-2's byte-to-unicode map: bits/byte = eval_loss * tokens / (ln 2 * bytes);
  * a byte-level model's bits per byte = nats / ln 2, with one byte per token;
  * generate with the KV cache prints the text of --no-kv-cache (sampled with a seed, so that
    the text varies: the tiny model's greedy text is one token repeated), on tensor 2 and on
    pipeline 2, past model.seq_length (context restarts), and the text is UTF-8.
Prints what it checks; exits 1 on the first mismatch. Exit 77 (skipped) without the vocabulary.
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_script import fail, json_line  # noqa: E402

exe, work, src = sys.argv[1], sys.argv[2], sys.argv[3]
mpi = sys.argv[4:]
vocab_dir = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ["HOME"], ".cache"), "tptrain", "gpt2")
if not os.path.isfile(os.path.join(vocab_dir, "encoder.json")):
    print(f"GPT-2's vocabulary is not in {vocab_dir}: skipped")
    sys.exit(77)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)


def run(args, expect_ok=True):
    p = subprocess.run(args, capture_output=True, timeout=240)
    if expect_ok and p.returncode != 0:
        sys.exit(f"FAILED ({p.returncode}): {' '.join(args)}\n{p.stdout.decode(errors='replace')}\n"
                 f"{p.stderr.decode(errors='replace')}")
    return p


def deck(name, text):
    path = os.path.join(work, name)
    with open(path, "w") as f:
        f.write(text)
    return path


# ---- a GPT-2 BPE model ----
# Trained on text that does not change with the repository (Debian's fortunes, which
# jobs/setup-deps.sh installs for input/tiny.toml): the comparison of sampled texts below is of
# one fixed model, not of whatever the README said at the commit (a near-flat distribution over
# 50257 tokens makes some seeds land on a rounding boundary).
corpus = [os.path.join("/usr/share/games/fortunes", f) for f in ("art", "computers")]
if not all(os.path.isfile(f) for f in corpus):
    print(f"{corpus} are not installed (Debian: fortunes, jobs/setup-deps.sh): skipped")
    sys.exit(77)
run([exe, "tokenize", *corpus, "--out", os.path.join(work, "shards"), "--tokenizer", "gpt2", "--valid-tokens", "4096"])
S, windows = 32, 12
bpe = deck("bpe.toml", f"""
[model]
layers = 2
hidden = 32
heads = 4
seq_length = {S}
vocab_size = 50257
[parallel]
tensor = 2
[training]
global_batch = 4
micro_batch = 2
steps = 30
[optimizer]
warmup_steps = 1
lr = 1e-2
[data]
train = "shards/train_000000.bin"
valid = "shards/valid_000000.bin"
tokenizer = "gpt2"
[run]
dir = "run_bpe"
[checkpoint]
dir = "ck_bpe"
resume = false
""")
run(mpi + ["-n", "2", exe, "train", bpe])
ck = os.path.join(work, "ck_bpe", "step_00000030.h5")

# eval against the formula, with the targets' bytes counted here
got = json_line(run(mpi + ["-n", "2", exe, "eval", bpe, "--checkpoint", ck, "--windows", str(windows)]).stdout.decode())
with open(os.path.join(work, "shards", "valid_000000.bin"), "rb") as f:
    header = struct.unpack("<256i", f.read(1024))
    assert header[0] == 20240520, header[:3]
    data = f.read()
tokens = struct.unpack(f"<{header[2]}H", data[: 2 * header[2]])


def bytes_to_unicode():  # GPT-2's encoder.py
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


byte_of = {c: b for b, c in bytes_to_unicode().items()}
with open(os.path.join(vocab_dir, "encoder.json"), encoding="utf-8") as f:
    encoder = json.load(f)
length = {i: len(bytes(byte_of[c] for c in piece)) for piece, i in encoder.items()}
targets = [tokens[j * S + t + 1] for j in range(windows) for t in range(S)]
nbytes = sum(length[t] for t in targets)
want = got["eval_loss"] * len(targets) / (math.log(2) * nbytes)
print(f"gpt2: eval_loss {got['eval_loss']}, {len(targets)} targets of {nbytes} bytes: bits/byte {got['bits_per_byte']}, "
      f"formula {want}")
if got["tokens"] != len(targets) or got["bytes"] != nbytes:
    fail(f"tokens/bytes {got['tokens']}/{got['bytes']}, counted {len(targets)}/{nbytes}")
if got["nats_per_token"] != got["eval_loss"] or abs(got["bits_per_byte"] - want) > 1e-7 * want:
    fail(f"bits per byte {got['bits_per_byte']} != {want}")

# generate: the KV cache prints the full forward's text, on tensor 2 and on pipeline 2
prompt = "The tokenizer splits caf\u00e9 and \u65e5\u672c\u8a9e into byte tokens"
for layout in (["--set", "parallel.tensor=2"], ["--set", "parallel.tensor=1", "--set", "parallel.pipeline=2"]):
    texts = []
    for flags in ([], ["--no-kv-cache"]):
        p = run(mpi + ["-n", "2", exe, "generate", bpe, "--checkpoint", ck, "--prompt", prompt, "--tokens", "70",
                       "--temperature", "0.8", "--seed", "11", "--ignore-eos"] + layout + flags)
        report = json_line(p.stderr.decode())
        if report["kv_cache"] != (not flags) or report["context_restarts"] < 2 or report["tokens_per_second"] <= 0:
            fail(f"report {report}")
        out = p.stdout.decode("utf-8")  # raises on anything but UTF-8
        texts.append(out[out.index(prompt):])
    print(f"{' '.join(layout)}: {texts[0]!r}")
    if texts[0] != texts[1]:
        fail(f"KV cache {texts[0]!r}\nfull forward {texts[1]!r}")
    if len(texts[0]) <= len(prompt) + 1:
        fail("nothing generated")

# ---- a byte-level model: bits per byte = nats / ln 2 ----
shutil.copy(os.path.join(src, "README.md"), os.path.join(work, "readme.txt"))
shutil.copy(os.path.join(src, "README.md"), os.path.join(work, "readme_valid.txt"))  # not the training file
byt = deck("bytes.toml", """
[model]
layers = 2
hidden = 32
heads = 4
seq_length = 16
[training]
global_batch = 2
micro_batch = 2
steps = 2
[optimizer]
warmup_steps = 1
[data]
train = "readme.txt"
valid = "readme_valid.txt"
[run]
dir = "run_bytes"
[checkpoint]
dir = "ck_bytes"
resume = false
""")
run([exe, "train", byt])
got = json_line(run([exe, "eval", byt, "--checkpoint", os.path.join(work, "ck_bytes", "step_00000002.h5"),
                     "--windows", "5"]).stdout.decode())
print(f"bytes: {got}")
if got["bytes"] != got["tokens"] or abs(got["bits_per_byte"] - got["eval_loss"] / math.log(2)) > 1e-7 * got["bits_per_byte"]:
    fail("a byte-level model's bits per byte is not nats / ln 2")
print("ok")
