#!/usr/bin/env python3
"""Every JSON line tptrain writes, parsed strictly: `plan` (also with figures beyond a double),
`check --json`, `bench`, `eval` and metrics.jsonl (also of an fp16 run whose steps overflow).

Strict: UTF-8, RFC 8259 JSON only (no NaN, Infinity, "inf" or "-nan"), one object per line, no
key twice. A value that is not finite must be null, and the run must have produced at least one
such null where this script provokes one, so that the test cannot pass by printing nothing.

usage: strict_json.py WORK EXE SOURCE_DIR CHECKPOINT RUN_DIR MPIEXEC-COMMAND...
  CHECKPOINT  a checkpoint of tests/data/cli/valid.toml (fp32), RUN_DIR the run that wrote it
       strict_json.py --lines [--null KEY] FILE...
  only check the lines of FILEs that start with '{' (at least one; with --null, KEY null in
  one of them); prints why and exits 1 otherwise (tests/hostile/hostile_pass.sh)
"""
import json
import os
import shutil
import subprocess
import sys

failures = []
quiet = False  # --lines: only a failure speaks


def reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def unique_keys(pairs):
    keys = [k for k, _ in pairs]
    for k in keys:
        if keys.count(k) > 1:
            raise ValueError(f"key {k!r} twice")
    return dict(pairs)


def strict(line):
    """The object of one JSON line; raises on anything RFC 8259 does not allow."""
    value = json.loads(line, parse_constant=reject_constant, object_pairs_hook=unique_keys)
    if not isinstance(value, dict):
        raise ValueError("not an object")
    return value


def nulls(value, path=""):
    """Paths of the null values in a parsed line."""
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in nulls(v, f"{path}.{k}" if path else k)]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in nulls(v, f"{path}[{i}]")]
    return []


def check_lines(what, text, expect_lines=1, expect_null=None):
    """Every line of `text` that starts with '{' parses strictly; returns the objects."""
    objects = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.startswith("{"):
            continue
        try:
            objects.append(strict(line))
        except ValueError as e:
            failures.append(f"{what}: line {n} is not strict JSON ({e}): {line[:300]}")
    if len(objects) < expect_lines:
        failures.append(f"{what}: {len(objects)} JSON lines, expected at least {expect_lines}")
    if expect_null is not None and objects:
        found = [p for o in objects for p in nulls(o)]
        if not any(p == expect_null or p.endswith(expect_null) for p in found):
            failures.append(f"{what}: expected {expect_null} to be null, the nulls are {found}")
    if not quiet:
        print(f"{what}: {len(objects)} JSON line(s) parse strictly")
    return objects


def run(what, args, expect_rc=None, **kw):
    p = subprocess.run(args, capture_output=True, timeout=240, cwd=work)
    try:
        out = p.stdout.decode("utf-8")
    except UnicodeDecodeError as e:
        failures.append(f"{what}: stdout is not UTF-8 ({e})")
        out = p.stdout.decode("utf-8", "replace")
    if expect_rc is not None and p.returncode != expect_rc:
        failures.append(f"{what}: exit {p.returncode}, expected {expect_rc}\n{p.stderr.decode(errors='replace')[-2000:]}")
    return out, p.stderr.decode("utf-8", "replace")


if sys.argv[1] == "--lines":
    quiet = True
    args = sys.argv[2:]
    key = None
    if args[:1] == ["--null"]:
        key, args = args[1], args[2:]
    for path in args:
        with open(path, "rb") as f:
            check_lines(path, f.read().decode("utf-8"), 1, key)
    if failures:
        print("; ".join(failures)[:1000])
        sys.exit(1)
    sys.exit(0)

work, exe, source, checkpoint, run_dir = map(os.path.abspath, sys.argv[1:6])
mpi2 = sys.argv[6:]
decks = os.path.join(source, "tests", "data", "cli")
deck = os.path.join(decks, "valid.toml")

shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)

# plan: its last line, in every kind of result, and with figures beyond a double.
plans = [
    ("plan", [deck], 0, None),
    ("plan with suggestions", [deck, "--gpus", "4"], 1, None),
    ("plan of the seed deck", [os.path.join(source, "input", "gpt3-175b-seed.toml"), "--gpus", "1024"], 1, None),
    ("plan --gpu-memory 1e300", [deck, "--gpu-memory", "1e300"], 0, "gpu_memory_bytes"),
    ("plan --tokens 1e308 --peak-tflops 1e-300", [deck, "--tokens", "1e308", "--peak-tflops", "1e-300"], 0,
     "training_days"),
    ("plan with suggestions of NaN days", [deck, "--gpus", "4", "--tokens", "5e-324", "--peak-tflops", "5e-324"], 1,
     "suggestions[0].training_days"),
]
for what, args, rc, null in plans:
    out, err = run(what, [exe, "plan"] + args, rc)
    lines = out.splitlines()
    if not lines or not lines[-1].startswith("{"):
        failures.append(f"{what}: the last line is not the JSON line: {lines[-1:]}")
    check_lines(what, out, 1, null)
    if null and "null in the JSON line" not in out:
        failures.append(f"{what}: the report does not say why {null} is null")

out, _ = run("check --json", [exe, "check", deck, "--json"], 0)
check_lines("check --json", out)

# bench on one rank: its JSON line.
out, _ = run("bench", [exe, "bench", os.path.join(decks, "bench.toml"), "--set", "parallel.tensor=1", "--steps", "1",
                       "--warmup", "0"], 0)
check_lines("bench", out)

out, _ = run("eval", mpi2 + [exe, "eval", deck, "--checkpoint", checkpoint], 0)
check_lines("eval", out)

# metrics.jsonl of the fp32 run that wrote the checkpoint.
with open(os.path.join(run_dir, "metrics.jsonl"), "rb") as f:
    check_lines("metrics.jsonl (fp32)", f.read().decode("utf-8"), 2)

# An fp16 run whose gradients overflow: from the default loss scale 2^32 this model's do, and
# both steps are skipped; their grad_norm must be null. (A loss that is not finite stops an fp16
# run before its record is written, docs/design.md "Mixed precision"; tests/reliability_cases.sh
# fp16_overflow.)
fp16_run = os.path.join(work, "fp16")
out, err = run("train fp16", mpi2 + [exe, "train", deck, "--set", "training.precision=fp16", "--set",
                                     f"run.dir={fp16_run}", "--set", "training.steps=2", "--set",
                                     "training.log_interval=1"], 0)
metrics = os.path.join(fp16_run, "metrics.jsonl")
if not os.path.exists(metrics):
    failures.append(f"train fp16: no {metrics}\n{out[-2000:]}\n{err[-2000:]}")
else:
    with open(metrics, "rb") as f:
        check_lines("metrics.jsonl (fp16, overflowing steps)", f.read().decode("utf-8"), 2, "grad_norm")

if failures:
    print("\n".join(f"FAIL: {x}" for x in failures), file=sys.stderr)
    sys.exit(1)
print("every JSON line parses strictly")
