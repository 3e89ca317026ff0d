#!/usr/bin/python3
"""Asynchronous checkpoints (checkpoint.async; docs/design.md, "Asynchronous checkpoints").

  async_checkpoint.py EXE WORK_DIR CORPUS_DIR MPIEXEC...

On 2 ranks, a small byte-level GPT:
  * every layout kind -- tensor 2, pipeline 2, pipeline 2 interleaved, data 2, data 2 with the
    distributed optimizer and with sharded parameters, tensor 2 in bf16 -- writes the same checkpoints with
    checkpoint.async = true as without: every dataset bit for bit and every attribute, but the
    run's own id (/train run_id, and the metadata checksum over it);
  * a write still in flight makes the next checkpoint wait, and say so (test hook
    checkpoint_seconds), and the run's end waits for the last one;
  * SIGKILL at three points of a background write (the file created, halfway through the data,
    before the rename) leaves the previous checkpoint intact and no newer one, and the resumed
    run's losses equal the uninterrupted run's, bit for bit;
  * a forced failure of the background write (test hook fail_in_checkpoint) stops the run with
    the error and exit status of a synchronous one, and the previous checkpoint stays.
Prints what it checks; exits 1 on the first mismatch, 77 (skipped) without h5py and numpy.
"""
import glob
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_script import fail, output, run  # noqa: E402

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"async_checkpoint.py: skipped: {e} (Debian: python3-h5py)")
    sys.exit(77)

exe, work, corpus_dir = sys.argv[1], sys.argv[2], sys.argv[3]
mpi = sys.argv[4:] + ["-n", "2"]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)


deck = os.path.join(work, "small.toml")
open(deck, "w").write(f"""
[model]
layers = 4
hidden = 32
heads = 4
seq_length = 16
[parallel]
tensor = 2
[training]
global_batch = 8
micro_batch = 2
steps = 6
log_interval = 1
eval_interval = 0
[optimizer]
warmup_steps = 1
decay = "constant"
[checkpoint]
interval = 2
keep = 10
[data]
train = "{os.path.join(corpus_dir, 'corpus.txt')}"
""")


def train(name, sets, hooks=(), ok=True, resume=False):
    args = mpi + [exe, "train", deck, "--set", f"run.dir={work}/{name}", "--set", f"checkpoint.dir={work}/{name}/ck",
                  "--set", f"checkpoint.resume={'true' if resume else 'false'}", *sets]
    for h in hooks:
        args += ["--test-hook", h]
    p = run(args, ok=True if ok else None, timeout=240)
    return p.returncode, output(p)


def losses(name):
    return [(r["step"], r["loss"]) for r in map(json.loads, open(os.path.join(work, name, "metrics.jsonl")))]


def visit(f):
    """Every attribute and dataset of a checkpoint: path -> value (datasets as raw bytes)."""
    items = {}

    def add(name, obj):
        for k, v in obj.attrs.items():
            if k in ("run_id", "metadata_checksum_splitmix64"):  # this run's own id, and a checksum over it
                continue
            items[f"{name}@{k}"] = v.tobytes() if isinstance(v, np.ndarray) else v
        if isinstance(obj, h5py.Dataset):
            items[name] = obj[()].tobytes()

    add("/", f)
    f.visititems(add)
    return items


layouts = {
    "tensor2": [],
    "pipeline2": ["--set", "parallel.tensor=1", "--set", "parallel.pipeline=2"],
    "interleaved": ["--set", "parallel.tensor=1", "--set", "parallel.pipeline=2", "--set", "parallel.virtual_stages=2"],
    "data2": ["--set", "parallel.tensor=1", "--set", "parallel.data=2"],
    "data2_zero1": ["--set", "parallel.tensor=1", "--set", "parallel.data=2", "--set", "optimizer.distributed=true"],
    "data2_zero3": ["--set", "parallel.tensor=1", "--set", "parallel.data=2", "--set", "optimizer.shard=parameters"],
    "tensor2_bf16": ["--set", "training.precision=bf16"],
}
for name, sets in layouts.items():
    train(f"{name}_sync", sets)
    train(f"{name}_async", sets + ["--set", "checkpoint.async=true"])
    files = sorted(os.path.basename(p) for p in glob.glob(f"{work}/{name}_sync/ck/step_*.h5"))
    other = sorted(os.path.basename(p) for p in glob.glob(f"{work}/{name}_async/ck/step_*.h5"))
    if files != other or len(files) != 3:
        fail(f"{name}: synchronous checkpoints {files}, asynchronous {other}")
    for f in files:
        with h5py.File(f"{work}/{name}_sync/ck/{f}", "r") as a, h5py.File(f"{work}/{name}_async/ck/{f}", "r") as b:
            x, y = visit(a), visit(b)
            # The deck attribute names each run's folders and checkpoint.async: alike otherwise.
            x["/@deck"] = x["/@deck"].replace(f"{name}_sync", "RUN")
            y["/@deck"] = y["/@deck"].replace(f"{name}_async", "RUN").replace("async = true", "async = false")
            if x.keys() != y.keys():
                fail(f"{name} {f}: objects differ: {sorted(set(x) ^ set(y))}")
            differ = [k for k in x if not np.array_equal(np.asarray(x[k]), np.asarray(y[k]))]
            if differ:
                fail(f"{name} {f}: {differ[:5]} differ between the synchronous and the asynchronous file")
    if losses(f"{name}_sync") != losses(f"{name}_async"):
        fail(f"{name}: the losses differ with checkpoint.async")
    print(f"{name}: {files} equal, synchronous and asynchronous ({len(x)} objects each)")

# A write in flight: the next checkpoint waits and says so; the end waits for the last.
_, out = train("slow", ["--set", "checkpoint.async=true", "--set", "checkpoint.interval=1"], ["checkpoint_seconds=0.3"])
if "waiting for the write of step" not in out or "waiting for the checkpoint write of step 6 to finish" not in out:
    fail(f"no wait was said:\n{out}")
if not os.path.exists(f"{work}/slow/ck/step_00000006.h5"):
    fail("the run ended before its last checkpoint was written")
print("in flight: the next checkpoint and the end waited, and said so")

# SIGKILL at three points of the background write of step 4; resume from step 2.
train("ref", [])
for point in ("created", "data", "rename"):
    killed = f"kill_{point}"
    rc, out = train(killed, ["--set", "checkpoint.async=true"], [f"kill_in_checkpoint=4@{point}"], ok=False)
    if rc == 0 or f"kill_in_checkpoint=4@{point}" not in out:
        fail(f"{point}: the run was not killed while writing step 4 (rc {rc}):\n{out}")
    ck = sorted(os.path.basename(p) for p in glob.glob(f"{work}/{killed}/ck/step_*.h5"))
    if ck != ["step_00000002.h5"]:
        fail(f"{point}: after the kill the checkpoints are {ck}, expected step 2 alone")
    train(killed, ["--set", "checkpoint.async=true"], resume=True)
    if losses(killed) != losses("ref"):
        fail(f"{point}: the resumed losses {losses(killed)} differ from the uninterrupted {losses('ref')}")
    print(f"killed at '{point}': step 2 intact, resumed bit for bit")

# A failed background write: the synchronous run's error and exit status; step 2 stays.
results = {}
for mode in ("false", "true"):
    rc, out = train(f"fail_{mode}", ["--set", f"checkpoint.async={mode}"], ["fail_in_checkpoint=4"], ok=False)
    errors = [l for l in out.splitlines() if "tptrain: error" in l]
    results[mode] = (rc, [e.replace(f"fail_{mode}", "RUN") for e in errors])
    ck = sorted(os.path.basename(p) for p in glob.glob(f"{work}/fail_{mode}/ck/step_*.h5"))
    if ck != ["step_00000002.h5"]:
        fail(f"async={mode}: after the failed write the checkpoints are {ck}, expected step 2 alone")
print(f"failed write: synchronous {results['false']}, asynchronous {results['true']}")
if results["false"][0] != 1 or results["false"] != results["true"] or len(results["true"][1]) != 1:
    fail("the asynchronous failure is not the synchronous one's error and exit status")
if "test hook fail_in_checkpoint" not in results["true"][1][0]:
    fail("the error does not say what failed")
print("ok")
