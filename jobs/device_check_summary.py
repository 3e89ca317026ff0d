#!/usr/bin/env python3
"""summary.txt of jobs/device-check.sh, from its results.jsonl and gpu.csv (run after every step).

  device_check_summary.py RESULTS.jsonl [GPU.csv]

MFU twice: against the nominal dense bf16 peak of the GPU's model (the table below, or
--peak-bf16 of device-check, recorded as peak_bf16_tflops), and against the cuBLAS bf16 GEMM
rate `tptrain bench` measured in the same run (its gemm_peak_flops_per_rank; its "mfu"). A
PyTorch step is counted with the model FLOPs per token of the tptrain step of the same shape
(tptrain's formula: 6 N + 12 L S H, N without the position embedding), so that both sides divide
the same work by their own time, and against that step's measured GEMM peak.
"""
import json
import statistics
import sys
import time

# Nominal dense (no sparsity) bf16 tensor-core peaks, TFLOP/s, from NVIDIA's datasheets; the
# first pattern found in nvidia-smi's name wins (so "H100 NVL" before "H100").
NOMINAL_BF16 = [
    ("H200 NVL", 835), ("H100 NVL", 835), ("H100 PCIe", 756), ("GH200", 989), ("H200", 989),
    ("H100", 989), ("H800", 989), ("A100", 312), ("A800", 312), ("L40S", 362),
]


def nominal_peak(name):
    for pattern, tf in NOMINAL_BF16:
        if pattern.lower() in name.lower():
            return tf, pattern
    return None, None


def num(x):
    return x if isinstance(x, (int, float)) else None


def fmt(x, spec, width):
    return format(x, spec).rjust(width) if x is not None else "-".rjust(width)


def number(x):
    try:
        return float(x)
    except ValueError:
        return None  # [N/A]


def gpu_samples(path):
    """Per step: the nvidia-smi samples taken while it ran (clocks.sm, power.draw, memory.used)."""
    steps, current = {}, None
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return steps, None
    note = None
    for line in lines:
        if line.startswith("# step "):
            current = line.split()[2]
            steps.setdefault(current, [])
        elif line.startswith("# rehearsal"):
            note = line[2:]
        elif current and not line.startswith("#"):
            f = [x.strip() for x in line.split(",")]
            if len(f) < 7:
                continue  # a cut line
            sample = (number(f[1]), number(f[3]), number(f[6]))
            if sample[0] is not None:
                steps[current].append(sample)
    return steps, note


def main():
    results = sys.argv[1]
    rows = []
    for line in open(results, errors="replace"):
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass  # a line cut by a kill
    machine = next((r for r in rows if r.get("step") == "machine"), {})
    steps = [r for r in rows if r.get("step") not in ("machine", "end")]
    end = next((r for r in rows if r.get("step") == "end"), None)
    rehearsal = machine.get("rehearsal") == "1"
    out = []
    w = out.append
    w(f"device-check {'REHEARSAL (CPU bundle, small shapes: no GPU figures)' if rehearsal else 'on a GPU'}"
      f"{' --quick' if machine.get('quick') == '1' else ''}, "
      f"{'finished' if end else 'in progress or cut short'} at {time.strftime('%H:%M:%S', time.gmtime())} UTC")
    gpu = machine.get("gpu", "unknown")
    w(f"GPU: {gpu}" + (f" (sm_{machine['gpu_cc']})" if machine.get("gpu_cc") else ""))
    q = [x.strip() for x in machine.get("gpu_query", "").split(",")]
    if len(q) >= 8:
        w(f"  memory {q[2]}, driver {q[3]}, SM clock max {q[4]} (now {q[5]}), memory clock max {q[6]}, "
          f"power limit {q[7]}")
    override = num(float(machine["peak_bf16_tflops"])) if machine.get("peak_bf16_tflops") else None
    table_tf, pattern = nominal_peak(gpu)
    peak = override or table_tf
    if rehearsal and not override:
        w("Nominal dense bf16 peak: none (rehearsal on a CPU: MFU against the measured GEMM peak only)")
    elif override:
        w(f"Nominal dense bf16 peak: {override:g} TFLOP/s (--peak-bf16)")
    elif table_tf:
        w(f"Nominal dense bf16 peak: {table_tf:g} TFLOP/s (datasheet, {pattern})")
    else:
        w("Nominal dense bf16 peak: unknown for this model (not in the table; give --peak-bf16 TF): "
          "MFU against it not reported")
    w(f"Bundle: tptrain {machine.get('commit', '?')} ({machine.get('tptrain_version', '')}); Kokkos "
      f"{machine.get('kokkos_backends', '?')}, arch {machine.get('kokkos_arch') or '-'}; Kokkos Kernels TPLs "
      f"{machine.get('kernels_tpls', '?')}; NCCL {machine.get('nccl', '?')}; glibc {machine.get('glibc', '?')} "
      f"(needs {machine.get('glibc_min', '?')})")
    w(f"PyTorch: {machine.get('torch', 'none')}")
    for n in filter(None, machine.get("notes", "").splitlines()):
        w(f"Note: {n}")
    for n in filter(None, machine.get("refusals", "").splitlines()):
        w(f"REFUSED: {n}")

    by_name = {r.get("step"): r for r in steps}
    w("")
    w(f"{'step':<21} {'status':<8} {'s/budget':>9} {'tokens/s':>11} {'model TF/s':>10} {'MFU nom.':>8} "
      f"{'GEMM TF/s':>9} {'GEMM/nom.':>9} {'MFU GEMM':>8} {'vs torch':>8}")
    for r in steps:
        name, status = r.get("step", "?"), r.get("status", "?")
        took = f"{r.get('seconds', '-')}/{r.get('budget_s', '-')}"
        res = r.get("result") or {}
        tok = tf = gemm = mfu_gemm = ratio = None
        if r.get("kind") == "bench" and res:
            tok = num(res.get("tokens_per_s"))
            tf = (num(res.get("model_flops_per_s_per_rank")) or 0) / 1e12 or None
            gemm = (num(res.get("gemm_peak_flops_per_rank")) or 0) / 1e12 or None
            mfu_gemm = num(res.get("mfu"))
            t = (by_name.get(name.replace("tptrain-", "torch-")) or {}).get("result") or {} if name.startswith("tptrain-") else {}
            if tok and num(t.get("tokens_per_s")):
                ratio = tok / t["tokens_per_s"]
        elif r.get("kind") == "torch" and res:
            tok = num(res.get("tokens_per_s"))
            pair = (by_name.get(name.replace("torch-", "tptrain-")) or {}).get("result") or {}
            per_token = num(pair.get("model_flops_per_token")) or num(res.get("model_flops_per_token"))
            if tok and per_token:
                tf = tok * per_token / 1e12
            gemm = (num(pair.get("gemm_peak_flops_per_rank")) or 0) / 1e12 or None
            if tf and gemm:
                mfu_gemm = tf / gemm
        mfu_nom = tf / peak if tf and peak and not rehearsal else None
        gemm_nom = gemm / peak if gemm and peak and not rehearsal else None
        line = (f"{name:<21} {status:<8} {took:>9} {fmt(tok, '.0f', 11)} {fmt(tf, '.3g', 10)} "
                f"{fmt(mfu_nom and 100 * mfu_nom, '.1f', 7)}{'%' if mfu_nom else ' '} {fmt(gemm, '.3g', 9)} "
                f"{fmt(gemm_nom and 100 * gemm_nom, '.1f', 8)}{'%' if gemm_nom else ' '} "
                f"{fmt(mfu_gemm and 100 * mfu_gemm, '.1f', 7)}{'%' if mfu_gemm else ' '} {fmt(ratio, '.2f', 8)}")
        w(line.rstrip())
        detail = []
        if r.get("kind") == "bench" and res:
            detail.append(f"{res.get('layers')}L h{res.get('hidden')} s{res.get('seq_length')} "
                          f"batch {res.get('global_batch')}/{res.get('micro_batch')} {res.get('precision')}, "
                          f"step {1e3 * (num(res.get('step_s')) or 0):.1f} ms, {res.get('kokkos')}, "
                          f"attention {(res.get('launches') or {}).get('attention_path', '?')}, "
                          f"GEMM {res.get('gemm_model_shape')}")
        elif r.get("kind") == "torch" and res:
            detail.append(f"{res.get('layers')}L h{res.get('hidden')} s{res.get('seq_length')} "
                          f"batch {res.get('global_batch')}/{res.get('micro_batch')} {res.get('precision')}, "
                          f"step {1e3 * (num(res.get('step_s')) or 0):.1f} ms, torch {res.get('torch_version')} "
                          f"on {res.get('device')}, SDPA {res.get('sdpa')}")
        if r.get("kind") == "test" and r.get("last_line"):
            detail.append(r["last_line"].strip())
        if r.get("note"):
            detail.append(r["note"])
        if status in ("failed", "killed") and r.get("kind") != "test":
            detail.append(f"exit {r.get('exit')}; {r.get('last_line') or 'see steps.log'}")
        for d in detail:
            w(f"{'':<21}   {d}")

    samples, note = gpu_samples(sys.argv[2]) if len(sys.argv) > 2 else ({}, None)
    if any(samples.values()):
        w("")
        w("Under load (gpu.csv, 1 s samples): SM clock median / max MHz, power max W, memory max MiB")
        for name, s in samples.items():
            if s:
                sm = [x[0] for x in s]
                power = [x[1] for x in s if x[1] is not None]
                mem = [x[2] for x in s if x[2] is not None]
                w(f"  {name:<21} {statistics.median(sm):6.0f} / {max(sm):6.0f}   "
                  f"{fmt(max(power) if power else None, '.0f', 6)} W   {fmt(max(mem) if mem else None, '.0f', 8)} MiB")
    elif note:
        w("")
        w(f"GPU samples: {note}")

    failed = [r["step"] for r in steps if r.get("status") in ("failed", "killed")]
    skipped = [r["step"] for r in steps if r.get("status") == "skipped"]
    w("")
    if end:
        w(f"Result: {'FAILED: ' + ' '.join(failed) if failed else 'OK'} in {end.get('seconds')} s"
          f"{'; skipped: ' + ' '.join(skipped) if skipped else ''}")
    elif machine.get("status") == "refused":
        w("Result: REFUSED (above): nothing ran")
    else:
        w(f"Result so far: {len(steps)} step(s) done{'; failed: ' + ' '.join(failed) if failed else ''}"
          " (the run is going on, or was killed: its last step is in steps.log)")
    print("\n".join(out))


if __name__ == "__main__":
    main()
