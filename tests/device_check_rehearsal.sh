#!/usr/bin/env bash
# The device check cannot rot unseen: a CPU bundle packed from this build tree
# (jobs/pack-device-bundle.sh) and `jobs/device-check.sh --rehearse --quick` on it, in the
# stripped environment of a bare GPU machine (env -i, PATH=/usr/bin:/bin behind stubs of mpiexec,
# h5dump, ...). Checks:
#   pack       MANIFEST records the Kokkos backends, Kokkos Kernels' TPLs and glibc_min
#   rehearse   exit 0; OUT holds exactly summary.txt, results.jsonl, steps.log, device-check.log
#              and gpu.csv (the device tool returns at most 8 files); every bench step ok with
#              tokens/s, the measured GEMM peak and MFU as positive numbers; PyTorch's steps ok
#              with tokens/s (or skipped where PyTorch is not importable); the tests ok; nothing
#              called what the GPU machine lacks; summary.txt says "Result: OK"
#   refuse     the same bundle without --rehearse is refused (not a CUDA build), exit 1, before
#              any step; --build is refused with the packing commands, exit 2
# Usage: device_check_rehearsal.sh BUILD_DIR WORKDIR
set -uo pipefail
build=$1 work=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fail() { echo "device_check_rehearsal: FAILED: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work"

# A bundle that stays here: no xz (seconds of CPU saved), no size limit.
TPTRAIN_BUNDLE_XZ=0 TPTRAIN_BUNDLE_MAX_MIB=0 "$root/jobs/pack-device-bundle.sh" "$build" "$work/bundle" \
  >"$work/pack.log" 2>&1 || { tail -n 30 "$work/pack.log"; fail "jobs/pack-device-bundle.sh $build"; }
for key in kokkos_backends kernels_tpls glibc_min; do
  grep -Eq "^$key=[A-Z0-9]" "$work/bundle/MANIFEST" || { cat "$work/bundle/MANIFEST"; fail "MANIFEST has no $key"; }
done
grep -q "MiB ([0-9]* bytes); with the repository" "$work/pack.log" || fail "pack-device-bundle.sh printed no size"

start=$SECONDS
"$root/jobs/device-check.sh" --bundle "$work/bundle" --rehearse --quick --out "$work/out" --work "$work/scratch" \
  >"$work/rehearse.log" 2>&1
rc=$?
echo "device_check_rehearsal: rehearsal exit $rc in $((SECONDS - start)) s"
cat "$work/out/summary.txt" 2>/dev/null
[ "$rc" = 0 ] || { tail -n 40 "$work/rehearse.log"; fail "device-check.sh --rehearse --quick exited $rc"; }
files=$(find "$work/out" -mindepth 1 -printf '%f\n' | sort | tr '\n' ' ')
[ "$files" = "device-check.log gpu.csv results.jsonl steps.log summary.txt " ] || fail "OUT holds: $files"
python3 - "$work/out/results.jsonl" <<'PY' || fail "results.jsonl (above)"
import json, sys
rows = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
bad = []
def positive(r, *keys):
    res = r.get("result") or {}
    return all(isinstance(res.get(k), (int, float)) and res[k] > 0 for k in keys)
for name in ("smoke-124m-bf16", "tptrain-1.3b-bf16", "tptrain-124m-bf16"):
    r = rows.get(name, {})
    if r.get("status") != "ok" or not positive(r, "tokens_per_s", "gemm_peak_flops_per_rank", "mfu"):
        bad.append(f"{name}: {r.get('status')} {str(r.get('result'))[:200]}")
for name in ("torch-1.3b-bf16", "torch-124m-bf16"):
    r = rows.get(name, {})
    if not (r.get("status") == "skipped" or (r.get("status") == "ok" and positive(r, "tokens_per_s"))):
        bad.append(f"{name}: {r.get('status')}")
tests = [r for n, r in rows.items() if n.startswith("test-")]
if not tests or any(r.get("status") != "ok" for r in tests):
    bad.append(f"tests: {[(r['step'], r['status']) for r in tests]}")
for name in ("machine", "stripped-environment", "end"):
    if rows.get(name, {}).get("status") != "ok":
        bad.append(f"{name}: {rows.get(name)}")
if bad:
    sys.exit("\n".join(bad))
PY
grep -q '^Result: OK' "$work/out/summary.txt" || fail "summary.txt does not say Result: OK"
grep -Eq '^tptrain-1.3b-bf16 +ok +[0-9]+/[0-9]+ +[0-9]+ ' "$work/out/summary.txt" || fail "summary.txt has no tokens/s for tptrain-1.3b-bf16"

# A GPU run refuses a CPU bundle before any step, and a build option is refused outright.
"$root/jobs/device-check.sh" --bundle "$work/bundle" --out "$work/refused" --work "$work/scratch-refused" \
  >"$work/refused.log" 2>&1
rc=$?
[ "$rc" = 1 ] || { cat "$work/refused.log"; fail "a CPU bundle on a GPU run: exit $rc, expected 1"; }
grep -q 'REFUSED: the bundle is not a CUDA build' "$work/refused/summary.txt" || { cat "$work/refused/summary.txt"; fail "no refusal in summary.txt"; }
! grep -q '"step": "smoke' "$work/refused/results.jsonl" || fail "a refused bundle ran a step"
"$root/jobs/device-check.sh" --bundle "$work/bundle" --build "$build" >"$work/build.log" 2>&1
rc=$?
if [ "$rc" != 2 ] || ! grep -q 'jobs/pack-device-bundle.sh build-cuda device-bundle' "$work/build.log"; then
  cat "$work/build.log"
  fail "--build: exit $rc, expected 2 and the packing commands"
fi
echo "device_check_rehearsal: OK in $SECONDS s"
