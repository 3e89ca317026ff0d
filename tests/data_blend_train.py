#!/usr/bin/python3
"""Weighted data blends end to end (tests/cli_data_tests.cmake; docs/design.md, "Blends").

  data_blend_train.py EXE WORK_DIR CORPUS_DIR MPIEXEC...

Two byte-token datasets, A (the test corpus) and B (the same text upper-cased, so that the two
differ in every letter), blended 0.8 / 0.2 in data.train and data.valid of a small GPT:
  * 200 steps on 1 rank, on 2 data-parallel ranks, and as 100 + a resume to 200 on 2 ranks:
    the final data_share is within 0.03 of [0.8, 0.2] and identical in the three runs; the
    losses of the three agree (1 vs 2 ranks to 1e-5 relative, the resume bit for bit);
  * data_epochs = sequences drawn x seq_length / the dataset's tokens, from the shares;
  * eval_loss = 0.8 eval_loss_by_dataset[0] + 0.2 eval_loss_by_dataset[1], and `tptrain eval`
    on the blend gives each dataset's loss as `eval --data` on that dataset alone;
  * a one-entry blend trains exactly as the plain path;
  * bad blends are refused naming the entry: a weight <= 0, NaN, a missing path, an empty
    array, and entries holding different kinds of tokens (.txt bytes and .bin shards).
Prints what it checks; exits 1 on the first mismatch.
"""
import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_script import fail, output, run  # noqa: E402

exe, work, corpus_dir = sys.argv[1], sys.argv[2], sys.argv[3]
mpi = sys.argv[4:]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)


def run_text(args, ok=True):
    return output(run(args, ok))


text = open(os.path.join(corpus_dir, "corpus.txt"), "rb").read()
valid_text = open(os.path.join(corpus_dir, "corpus_valid.txt"), "rb").read()
data = {}
for name, train, valid in (("a", text, valid_text), ("b", text.upper(), valid_text.upper())):
    os.makedirs(os.path.join(work, name))
    for split, content in (("train", train), ("valid", valid)):
        path = os.path.join(work, name, split + ".txt")
        open(path, "wb").write(content)
        data[name, split] = path
S = 32


def blend(split, wa=0.8, wb=0.2):
    return f'[{{path = "{data["a", split]}", weight = {wa}}}, {{path = "{data["b", split]}", weight = {wb}}}]'


deck = os.path.join(work, "blend.toml")
open(deck, "w").write(f"""
[model]
layers = 1
hidden = 32
heads = 2
ffn_hidden = 64
seq_length = {S}
vocab_size = 256
[parallel]
tensor = 1
[training]
global_batch = 8
micro_batch = 4
steps = 200
log_interval = 50
eval_interval = 100
eval_windows = 4
[optimizer]
warmup_steps = 10
decay = "constant"
[data]
train = {blend("train")}
valid = {blend("valid")}
""")


def train(name, ranks, steps=200, extra=()):
    args = mpi + ["-n", str(ranks), exe, "train", deck, "--set", f"parallel.data={ranks}",
                  "--set", f"training.steps={steps}", "--set", f"run.dir={work}/{name}",
                  "--set", f"checkpoint.dir={work}/{name}/ck", "--set", "checkpoint.interval=100",
                  "--set", "checkpoint.resume=true", *extra]
    run(args)
    return [json.loads(line) for line in open(os.path.join(work, name, "metrics.jsonl"))]


one = train("one", 1)
two = train("two", 2)
train("halves", 2, steps=100)
halves = train("halves", 2)
last = {"one": one[-1], "two": two[-1], "halves": halves[-1]}
for name, rec in last.items():
    print(f"{name}: step {rec['step']} data_share {rec['data_share']} data_epochs {rec['data_epochs']} "
          f"eval_loss {rec.get('eval_loss')} by dataset {rec.get('eval_loss_by_dataset')}")
    if rec["step"] != 200:
        fail(f"{name}: the last record is step {rec['step']}, not 200")
share = last["one"]["data_share"]
if len(share) != 2 or abs(share[0] - 0.8) > 0.03 or abs(share[1] - 0.2) > 0.03 or abs(sum(share) - 1) > 1e-9:
    fail(f"data_share {share}: expected [0.8, 0.2] within 0.03")
for name in ("two", "halves"):
    if last[name]["data_share"] != share or last[name]["data_epochs"] != last["one"]["data_epochs"]:
        fail(f"{name}: data_share/epochs {last[name]['data_share']}/{last[name]['data_epochs']} differ from 1 rank's")
for i, (name, split) in enumerate((("a", "train"), ("b", "train"))):
    tokens = os.path.getsize(data[name, split])
    want = share[i] * 200 * 8 * S / tokens
    if abs(last["one"]["data_epochs"][i] - want) > 1e-5 * want:
        fail(f"data_epochs[{i}] = {last['one']['data_epochs'][i]}, expected {want} (shares x sequences x S / tokens)")


def losses(records):
    return {r["step"]: r["loss"] for r in records if "loss" in r}


l1, l2, lh = losses(one), losses(two), losses(halves)
for step, loss in l1.items():
    if abs(l2[step] - loss) > 1e-5 * abs(loss):
        fail(f"step {step}: loss {l2[step]} on 2 ranks, {loss} on 1")
    if lh[step] != l2[step]:
        fail(f"step {step}: loss {lh[step]} after the resume, {l2[step]} without")
print(f"losses: 1 rank {l1[200]}, 2 ranks {l2[200]}, resumed {lh[200]}")

# eval: the weighted mean, and each dataset's loss as eval --data gives it alone.
rec = last["one"]
by = rec["eval_loss_by_dataset"]
if abs(rec["eval_loss"] - (0.8 * by[0] + 0.2 * by[1])) > 1e-12:
    fail(f"eval_loss {rec['eval_loss']} is not 0.8 x {by[0]} + 0.2 x {by[1]}")
ck = os.path.join(work, "one", "ck", "step_00000200.h5")


def eval_json(*extra):
    out = run_text([exe, "eval", deck, "--checkpoint", ck, "--windows", "4", *extra])
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


whole = eval_json()
alone = [eval_json("--data", data[name, "valid"])["eval_loss"] for name in ("a", "b")]
print(f"eval: blend {whole}, alone {alone}")
if abs(whole["eval_loss_by_dataset"][0] - alone[0]) > 1e-8 or abs(whole["eval_loss_by_dataset"][1] - alone[1]) > 1e-8:
    fail(f"eval's per-dataset losses {whole['eval_loss_by_dataset']} differ from eval --data {alone}")
if abs(whole["eval_loss_by_dataset"][0] - by[0]) > 1e-6 * by[0]:
    fail(f"eval's loss on A {whole['eval_loss_by_dataset'][0]} differs from training's {by[0]}")

# A one-entry blend is the plain path.
single = train("single", 1, steps=20, extra=["--set", f'data.train=[{{path = "{data["a", "train"]}", weight = 3}}]',
                                             "--set", f"data.valid={data['a', 'valid']}"])
plain = train("plain", 1, steps=20, extra=["--set", f"data.train={data['a', 'train']}",
                                           "--set", f"data.valid={data['a', 'valid']}"])
if losses(single) != losses(plain):
    fail("a one-entry blend trains differently from its path")

# Bad blends, named by entry.
shard = os.path.join(work, "shard.bin")
with open(shard, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, 1000, *([0] * 253)))
    f.write(struct.pack("<1000H", *[t % 256 for t in range(1000)]))
bad = [
    (blend("train", 0.8, -1), "data.train[1].weight = -1: expected a finite weight > 0"),
    (blend("train", "nan", 0.2), "data.train[0].weight = nan: expected a finite weight > 0"),
    ("[]", "data.train = []: expected a path, or a blend of at least one"),
    (f'[{{weight = 1}}, {{path = "{data["b", "train"]}", weight = 1}}]', "data.train[0] = "),
    (f'[{{path = "{data["a", "train"]}", weight = 1}}, {{path = "{shard}", weight = 1}}]',
     "data.train[1] {path = "),
]
for value, expected in bad:
    out = run_text(mpi + ["-n", "1", exe, "train", deck, "--set", f"data.train={value}", "--set",
                     f"run.dir={work}/bad", "--set", f"checkpoint.dir={work}/bad/ck", "--set", "training.steps=12"],
              ok=False)
    if expected not in out:
        fail(f"data.train = {value}: expected the message to contain {expected!r}, got:\n{out}")
    print(f"refused: {[l for l in out.splitlines() if expected in l][0].strip()[:160]}")
print("ok")
