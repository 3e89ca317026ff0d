#!/usr/bin/python3
"""bench --calibrate and bench --trace end to end (tests/cli_tests.cmake).

  bench_calibrate_trace.py EXE WORK_DIR SOURCE_DIR MPIEXEC...

On input/bench/tiny.toml:
  * --calibrate on 1 rank and on 2 (data 2): the machine file is TOML with every key of the schema
    (docs/planning.md, "The machine file") in its type, the deck's GEMMs among the measured rows
    (tiny's QKV: 16 x 128 tokens by 3 x 128 by 128), efficiencies in (0, 1] and 1 for the best,
    the flash core at the sequence and at ring attention's chunk lengths of context 2 and 4,
    the link measured on 2 ranks and said to be a default on 1; `plan --machine` reads it;
  * --trace on 1 rank, on pipeline 2 with 2 virtual stages, and on tensor 2: strict JSON (RFC 8259,
    no key twice, as tests/strict_json.py parses), a process per rank, named threads, the spans the
    layout must have ("forward 3.1", "send/recv pipeline", "all-reduce (tensor parallel)",
    "optimizer", the names of plan --trace) on the threads of docs/benchmarks.md;
  * an unwritable --calibrate or --trace path: a failure that names the path, before any step.
Prints what it checks; exits 1 on the first mismatch.
"""
import json
import os
import re
import shutil
import sys
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_script import fail, output, run, json_line  # noqa: E402

exe, work, src = sys.argv[1], sys.argv[2], sys.argv[3]
mpi = sys.argv[4:]
deck = os.path.join(src, "input", "bench", "tiny.toml")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)


def mpirun(n, *args, ok=True):
    return run(mpi[:1] + ["-n", str(n)] + mpi[1:] + [exe, "bench", deck] + list(args), ok=ok)


# The schema's keys and their TOML types (float keys must be floats, counts integers).
SCHEMA = {
    "machine": {"name": str, "source": str},
    "device": {"name": str, "peak_tflops_bf16": float, "peak_tflops_fp16": float, "peak_tflops_fp32": float,
               "memory_gib": float, "memory_bandwidth_gbs": float, "compute_units": int},
    "node": {"devices": int, "link_bandwidth_gbs": float, "link_latency_us": float},
    "network": {"bandwidth_gbs": float, "latency_us": float},
    "gemm": {"max_efficiency": float, "tile_m": int, "tile_n": int},
}
ROW = {"precision": str, "m": int, "n": int, "k": int, "efficiency": float}
# The optional keys calibration measures (docs/planning.md: kernel_overhead_us, kernel_bandwidth_gbs,
# optimizer_bandwidth_gbs, attention_efficiency).
OPTIONAL = {"device": {"kernel_overhead_us": float, "kernel_bandwidth_gbs": float, "optimizer_bandwidth_gbs": float},
            "gemm": {"attention_efficiency": float}}
# What calibration measures of the node's collectives with 2 or more ranks in it (the bus bandwidth,
# the host's share of a collective's time), absent with one.
COLLECTIVES = {"collective_bandwidth_gbs": float, "communication_host_share": float}


def check_machine(path, ranks):
    text = open(path, encoding="utf-8").read()
    try:
        m = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        fail(f"{path} is not TOML: {e}\n{text}")
    for section, keys in SCHEMA.items():
        for key, kind in keys.items():
            if key not in m.get(section, {}):
                fail(f"{path}: [{section}] {key} missing")
            if type(m[section][key]) is not kind:
                fail(f"{path}: [{section}] {key} = {m[section][key]!r} is not a {kind.__name__}")
            if kind is float and not m[section][key] > 0:
                fail(f"{path}: [{section}] {key} = {m[section][key]} is not > 0")
        for key, kind in OPTIONAL.get(section, {}).items():
            if type(m[section].get(key)) is not kind or not m[section][key] > 0:
                fail(f"{path}: [{section}] {key} = {m[section].get(key)!r}: expected a measured {kind.__name__} > 0")
        if not m["gemm"]["attention_efficiency"] <= 1:
            fail(f"{path}: attention_efficiency {m['gemm']['attention_efficiency']} above 1")
        extra = set(m[section]) - set(keys) - set(OPTIONAL.get(section, {})) - (
            {"measured", "measured_attention"} if section == "gemm" else set()) - (
            set(COLLECTIVES) if section == "node" and ranks > 1 else set()) - (
            {"rank_time_share"} if section == "node" else set())
        if extra:
            fail(f"{path}: [{section}] has keys outside the schema: {extra}")
    if set(m) != set(SCHEMA):
        fail(f"{path}: sections {sorted(m)}, expected {sorted(SCHEMA)}")
    if not re.match(r"measured by tptrain bench --calibrate on \d{4}-\d\d-\d\d", m["machine"]["source"]):
        fail(f"{path}: machine.source = {m['machine']['source']!r}")
    rows = m["gemm"].get("measured", [])
    for r in rows:
        if set(r) != set(ROW) or any(type(r[k]) is not t for k, t in ROW.items()):
            fail(f"{path}: a [[gemm.measured]] row is not {ROW}: {r}")
        if not 0 < r["efficiency"] <= 1:
            fail(f"{path}: efficiency {r['efficiency']} outside (0, 1]: {r}")
    # The flash core at tiny's sequence (128) and at ring attention's chunk pairs of context 2 and 4
    # (32 and 16 queries and keys).
    attention = m["gemm"].get("measured_attention", [])
    if sorted((r["precision"], r["length"]) for r in attention) != [("fp32", 16), ("fp32", 32), ("fp32", 128)]:
        fail(f"{path}: [[gemm.measured_attention]] rows {attention}, expected fp32 at lengths 128, 32 and 16")
    if any(set(r) != {"precision", "length", "efficiency"} or not 0 < r["efficiency"] <= 1 for r in attention):
        fail(f"{path}: a [[gemm.measured_attention]] row is not precision, length, efficiency in (0, 1]: {attention}")
    if [r["efficiency"] for r in attention if r["length"] == 128] != [m["gemm"]["attention_efficiency"]]:
        fail(f"{path}: the row at the deck's sequence must repeat attention_efficiency")
    fp32 = [r for r in rows if r["precision"] == "fp32"]
    if (2048, 384, 128) not in [(r["m"], r["n"], r["k"]) for r in fp32]:
        fail(f"{path}: no row for tiny's QKV GEMM 2048 x 384 x 128 (16 x 128 tokens, 3 x 128 wide)")
    if max(r["efficiency"] for r in fp32) != 1.0 or m["gemm"]["max_efficiency"] != 1.0:
        fail(f"{path}: the best fp32 GEMM defines the peak: its efficiency and max_efficiency must be 1")
    if {r["precision"] for r in rows} != {"fp32", "bf16", "fp16"}:
        fail(f"{path}: rows for {sorted({r['precision'] for r in rows})}, expected all three precisions")
    if m["device"]["compute_units"] != 1 or m["node"]["devices"] != ranks:
        fail(f"{path}: a CPU rank is a device of 1 compute unit, {ranks} in the node: {m['device']}, {m['node']}")
    if ranks > 1:
        node = m["node"]
        if type(node.get("collective_bandwidth_gbs")) is not float or not node["collective_bandwidth_gbs"] > 0:
            fail(f"{path}: [node] collective_bandwidth_gbs = {node.get('collective_bandwidth_gbs')!r}: expected > 0")
        # MPI without a progress thread moves a collective's bytes inside its calls only: the host
        # drives (nearly) all of it.
        if type(node.get("communication_host_share")) is not float or not 0.5 <= node["communication_host_share"] <= 1:
            fail(f"{path}: [node] communication_host_share = {node.get('communication_host_share')!r}: "
                 "expected MPI's host-driven collectives, in [0.5, 1]")
    # More ranks than cores (not on this project's 2-core machines): the share of a core each holds.
    if "rank_time_share" in m["node"] and not 0 < m["node"]["rank_time_share"] < 1:
        fail(f"{path}: [node] rank_time_share = {m['node']['rank_time_share']!r}: expected a share of a core, "
             "written only below 1")
    said_default = "NOT measured" in text
    if said_default != (ranks == 1):
        fail(f"{path}: with {ranks} rank(s) the link must {'be' if ranks == 1 else 'not be'} said to be a default")
    if (m["network"]["bandwidth_gbs"], m["network"]["latency_us"]) != (m["node"]["link_bandwidth_gbs"],
                                                                        m["node"]["link_latency_us"]):
        fail(f"{path}: the network (not measured) must repeat the link")
    print(f"calibrate on {ranks} rank(s): {path} has every key; {len(rows)} GEMM rows; "
          f"peak fp32 {m['device']['peak_tflops_fp32']} TFLOP/s, link {m['node']['link_latency_us']} us")


for ranks, extra in ((1, []), (2, ["--set", "parallel.data=2", "--set", "training.micro_batch=8"])):
    path = os.path.join(work, f"machine-{ranks}.toml")
    p = mpirun(ranks, *extra, "--calibrate", path)
    j = json_line(output(p))
    if j.get("calibrate") != path or j.get("node_devices") != ranks or not 0 < j.get("rank_time_share", 0) <= 1:
        fail(f"calibrate's JSON line: {j}")
    check_machine(path, ranks)
    # The reader of machine files (io/machine_file.hpp, plan --machine) takes what calibration wrote.
    plan = json_line(output(run([exe, "plan", deck, "--machine", path])))
    if not plan.get("seconds_per_iteration", 0) > 0:
        fail(f"plan --machine {path}: no seconds_per_iteration > 0 in {plan}")
    print(f"plan --machine {path}: read, {plan['seconds_per_iteration']:.4g} s per iteration")


def strict(text):
    """As tests/strict_json.py: RFC 8259 only (no NaN or Infinity), no key twice."""
    def unique(pairs):
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError(f"a key twice in {keys}")
        return dict(pairs)

    def constant(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=constant, object_pairs_hook=unique)


STREAMS = {0: "compute", 1: "tensor-parallel", 2: "context-parallel", 3: "expert-parallel", 4: "pipeline",
           5: "data-parallel"}


def check_trace(path, ranks, must):
    """`must`: (name, stream) pairs every rank has a span of."""
    try:
        t = strict(open(path, encoding="utf-8").read())
    except ValueError as e:
        fail(f"{path} is not strict JSON: {e}")
    events = t["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    if procs != {r: f"rank {r}" for r in range(ranks)}:
        fail(f"{path}: processes {procs}, expected rank 0..{ranks - 1}")
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [e for e in events if e["ph"] == "X"]
    for e in spans:
        if threads.get((e["pid"], e["tid"])) != STREAMS.get(e["tid"]):
            fail(f"{path}: span {e} on a thread named {threads.get((e['pid'], e['tid']))!r}")
        if not (e["ts"] >= 0 and e["dur"] >= 0):
            fail(f"{path}: span {e} before the step's start or of negative length")
    for r in range(ranks):
        have = {(e["name"], e["tid"]) for e in spans if e["pid"] == r}
        for name, stream in must:
            if (name, stream) not in have:
                fail(f"{path}: rank {r} has no span {name!r} on {STREAMS[stream]}; it has {sorted(have)}")
    print(f"trace on {ranks} rank(s): {path}: {len(spans)} spans, {sorted(set(must))[:3]}... on every rank")


base = ["--steps", "1", "--warmup", "0"]
path = os.path.join(work, "trace-1.json")
j = json_line(output(mpirun(1, *base, "--trace", path)))
if j.get("trace") != path:
    fail(f"bench's JSON line has no \"trace\": {path}: {j}")
check_trace(path, 1, [("forward 0.0", 0), ("backward 0.0", 0), ("optimizer", 0)])

# Pipeline 2 x 2 virtual stages, 4 micro-batches: every rank forwards and backwards each on both chunks.
path = os.path.join(work, "trace-pipeline.json")
mpirun(2, *base, "--set", "parallel.pipeline=2", "--set", "parallel.virtual_stages=2", "--set",
       "training.micro_batch=4", "--trace", path)
check_trace(path, 2, [(f"{d} {m}.{c}", 0) for d in ("forward", "backward") for m in range(4) for c in (0, 1)]
            + [("send/recv pipeline", 4), ("optimizer", 0)])

path = os.path.join(work, "trace-tensor.json")
mpirun(2, *base, "--set", "parallel.tensor=2", "--trace", path)
check_trace(path, 2, [("forward 0.0", 0), ("all-reduce (tensor parallel)", 1)])

# Unwritable paths: refused before any step, the path named.
for option, name in (("--calibrate", "machine.toml"), ("--trace", "trace.json")):
    bad = os.path.join(work, "no-such-dir", name)
    p = mpirun(1, *base, option, bad, ok=False)
    text = output(p)
    if bad not in text or "cannot write" not in text or "bench: step" in text:
        fail(f"{option} {bad}: expected a refusal naming the path before any step, got:\n{text}")
    print(f"{option} to a missing folder: refused, naming {bad}")
print("bench --calibrate and --trace: all checks passed")
