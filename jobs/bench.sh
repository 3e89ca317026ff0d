#!/usr/bin/env bash
# The standard benchmark set: `tptrain bench` on each deck (default input/bench/{tiny,small,
# gpt2-124m}.toml) under mpiexec, and right after it, when PyTorch is importable, the same
# training step in PyTorch (jobs/bench_torch.py) on the same shape and number of threads.
# Prints one table and appends every JSON line to BENCH_OUT so runs can be compared.
#
#   jobs/bench.sh [DECK ...] [-- ARGS for tptrain check/bench, e.g. --set training.global_batch=4]
#
# Environment:
#   OMP_NUM_THREADS, OPENBLAS_NUM_THREADS  threads per rank (default 1 each)
#   BENCH_STEPS, BENCH_WARMUP  timed and untimed steps for every deck (default: per shape, so the
#                              whole set takes a few minutes on one core)
#   BENCH_PHASES   1 = `tptrain bench --phases`: as many steps again, timed phase by phase (the
#                  "top phases" column); tokens/s and MFU never include those steps' fences
#   BENCH_OUT      JSON-lines file (default runs/bench/bench-<date>.jsonl); logs go next to it
#   BENCH_TORCH    0 = skip PyTorch; BENCH_PYTHON = the python3 to run it with (default: the
#                  first of /usr/bin/python3, python3 that can import torch)
#   TPTRAIN_BUILD_DIR (default <repo>/build) or TPTRAIN_BIN (the tptrain executable itself)
# Exits non-zero, naming them, if any run failed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=jobs/env.sh
. "$root/jobs/env.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$OMP_NUM_THREADS}
threads=$OMP_NUM_THREADS

decks=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do decks+=("$1"); shift; done
[ $# -gt 0 ] && shift   # the "--"
extra=("$@")
[ ${#decks[@]} -gt 0 ] || decks=("$root/input/bench/tiny.toml" "$root/input/bench/small.toml"
                                 "$root/input/bench/gpt2-124m.toml")

exe=${TPTRAIN_BIN:-${TPTRAIN_BUILD_DIR:-$root/build}/tptrain}
if [ ! -x "$exe" ]; then
  echo "bench: no tptrain executable at $exe: build first: jobs/build.sh" >&2
  exit 2
fi
# The bench decks' data.train (unused by `tptrain bench`, but the deck loader wants the file).
[ -f "$root/data/fortunes/train.txt" ] || "$root/jobs/prepare-data.sh" ||
  echo "bench: jobs/prepare-data.sh failed; decks pointing at data/fortunes will not load" >&2

# Any python3 parses the JSON; PyTorch may live in only one of them (Debian's python3-torch is
# for /usr/bin/python3, not for a pyenv or venv python3 earlier on PATH).
py=$(command -v python3 || echo /usr/bin/python3)
torch_py=
if [ "${BENCH_TORCH:-1}" != 0 ]; then
  for p in ${BENCH_PYTHON:-/usr/bin/python3 python3}; do
    if "$p" -c "import torch" >/dev/null 2>&1; then torch_py=$p; break; fi
  done
  [ -n "$torch_py" ] || echo "bench: PyTorch not importable (BENCH_PYTHON, /usr/bin/python3, python3): tptrain only"
fi

stamp=$(date +%Y%m%d-%H%M%S)
out=${BENCH_OUT:-$root/runs/bench/bench-$stamp.jsonl}
mkdir -p "$(dirname "$out")"
logs=${out%.jsonl}.logs
mkdir -p "$logs"
run_jsonl=$(mktemp)          # this run's lines, for the table
trap 'rm -f "$run_jsonl"' EXIT

# Prints the JSON objects in file $1 whose text starts with $2 (e.g. '{"bench":'), one a line;
# a line may carry a prefix such as "[0] " or a timestamp before the object.
extract() {
  "$py" - "$1" "$2" <<'EOF'
import json, sys
dec = json.JSONDecoder()
for line in open(sys.argv[1], errors="replace"):
    i = line.find(sys.argv[2])
    if i >= 0:
        try:
            print(json.dumps(dec.raw_decode(line[i:].strip())[0]))
        except ValueError:
            pass
EOF
}

# Header line: where and how this run was made.
"$py" - "$stamp" "$threads" "$exe" >>"$out" <<'EOF'
import json, os, platform, sys
cpu = ""
try:
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
except OSError:
    pass
print(json.dumps({"bench_run": sys.argv[1], "host": platform.node(), "cpu": cpu,
                  "nproc": os.cpu_count(), "threads": int(sys.argv[2]),
                  "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", ""),
                  "tptrain": sys.argv[3]}))
EOF

failed=()
for deck in "${decks[@]}"; do
  name=$(basename "$deck" .toml)
  case $name in
    tiny) steps=20 warmup=3 ;;
    small) steps=5 warmup=2 ;;
    gpt2-124m) steps=3 warmup=2 ;;
    *) steps=5 warmup=2 ;;
  esac
  steps=${BENCH_STEPS:-$steps} warmup=${BENCH_WARMUP:-$warmup}

  if ! ranks=$("$exe" check "$deck" "${extra[@]}" --ranks) ||
     ! resolved=$("$exe" check "$deck" "${extra[@]}" --json); then
    echo "bench: $name: tptrain check failed" >&2
    failed+=("$name (deck)")
    continue
  fi
  mapfile -t flags < <(mpi_flags "$ranks")
  log=$logs/$name.tptrain.log
  phases=()
  [ "${BENCH_PHASES:-0}" = 1 ] && phases=(--phases)
  echo "== $name: mpiexec -n $ranks ${flags[*]} $exe bench $deck --steps $steps --warmup $warmup${phases[*]:+ ${phases[*]}}${extra[*]:+ ${extra[*]}}"
  if mpiexec -n "$ranks" "${flags[@]}" "$exe" bench "$deck" --steps "$steps" --warmup "$warmup" \
       "${phases[@]}" "${extra[@]}" 2>&1 | tee "$log"; then
    line=$(extract "$log" '{"bench":' | tail -n 1)
    if [ -n "$line" ]; then
      echo "$line" | tee -a "$out" >>"$run_jsonl"
    else
      echo "bench: $name: tptrain printed no {\"bench\": line (log: $log)" >&2
      failed+=("$name (tptrain: no JSON)")
    fi
  else
    echo "bench: $name: tptrain bench failed (log: $log)" >&2
    failed+=("$name (tptrain)")
  fi

  [ -n "$torch_py" ] || continue
  # The same shape, batch, micro-batch and precision as tptrain ran (the resolved deck, --set
  # included), on as many threads in all as tptrain used over its ranks.
  printf '%s\n' "$resolved" >"$logs/$name.deck.json"
  shape=(--resolved "$logs/$name.deck.json")
  log=$logs/$name.torch.log
  torch_threads=$((ranks * threads))
  echo "== $name: PyTorch, $torch_threads thread(s)"
  if "$torch_py" "$root/jobs/bench_torch.py" --name "$name" "${shape[@]}" --steps "$steps" \
       --warmup "$warmup" --threads "$torch_threads" 2>&1 | tee "$log"; then
    line=$(extract "$log" '{"torch":' | tail -n 1)
    if [ -n "$line" ]; then
      echo "$line" | tee -a "$out" >>"$run_jsonl"
    else
      failed+=("$name (torch: no JSON)")
    fi
  else
    echo "bench: $name: bench_torch.py failed (log: $log)" >&2
    failed+=("$name (torch)")
  fi
done

echo
"$py" - "$run_jsonl" "${decks[@]}" <<'EOF'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tp = {r["bench"]: r for r in rows if "bench" in r}
th = {r["torch"]: r for r in rows if "torch" in r}

def f(x, fmt):
    return "-" if x is None else format(x, fmt)

head = ["shape", "ranks x thr", "tok/s tptrain", "MFU", "GEMM peak GFLOP/s", "tok/s PyTorch",
        "tptrain/PyTorch", "top phases"]
table = [head]
for deck in sys.argv[2:]:
    name = os.path.splitext(os.path.basename(deck))[0]
    b, t = tp.get(name, {}), th.get(name, {})
    tok, ttok = b.get("tokens_per_s"), t.get("tokens_per_s")
    mfu = b.get("mfu")
    peak = b.get("gemm_peak_flops_per_rank")
    phases = b.get("phases_s") or {}
    total = sum(v for v in phases.values() if isinstance(v, (int, float))) or None
    top = sorted(((v, k) for k, v in phases.items() if isinstance(v, (int, float))), reverse=True)[:3]
    table.append([
        name,
        f"{b['ranks']}x{b['threads']}" if "ranks" in b and "threads" in b else "-",
        f(tok, ".0f") if b else "FAILED",
        f(None if mfu is None else 100 * mfu, ".1f") + ("%" if mfu is not None else ""),
        f(None if peak is None else peak / 1e9, ".1f"),
        f(ttok, ".0f"),
        f(tok / ttok if tok and ttok else None, ".2f"),
        ", ".join(f"{k} {100 * v / total:.0f}%" for v, k in top) if total else "-",
    ])
w = [max(len(r[i]) for r in table) for i in range(len(head))]
for i, r in enumerate(table):
    print(" | ".join(c.ljust(w[j]) if j in (0, 7) else c.rjust(w[j]) for j, c in enumerate(r)).rstrip())
    if i == 0:
        print("-+-".join("-" * x for x in w))
blas = sorted({r["blas"] for r in tp.values() if r.get("blas")})
if blas:
    print("tptrain BLAS: " + "; ".join(blas))
for name, t in th.items():  # a busy machine: the process got much less CPU than wall time
    if t.get("cpu_s_per_step") and t["cpu_s_per_step"] < 0.8 * t["threads"] * t["step_s"]:
        print(f"warning: {name}: PyTorch got {t['cpu_s_per_step'] / t['step_s']:.1f} CPUs of "
              f"{t['threads']} (other load on the machine?); by CPU time {t['tokens_per_cpu_s']:.0f} tok/s")
EOF
echo "JSON lines: $out (logs: $logs/)"

if [ ${#failed[@]} -gt 0 ]; then
  echo "bench: FAILED: ${failed[*]}" >&2
  exit 1
fi
