#!/usr/bin/env bash
# The planner's step-time model against this machine (issue 53, "Validation 1"): for each case
# (a deck and a layout on 1, 2 or 4 ranks) the measured step time of `tptrain bench` and the
# predicted one of `tptrain plan DECK --machine CALIBRATED.toml`, as a markdown table
#   case | ranks | measured s | predicted s | error %
# (error = predicted / measured - 1). Takes about 25 minutes on a 2-core machine (15 calibrating once per deck).
#
#   jobs/validate-step-model.sh [CASE-REGEX]     only the cases whose name matches
#
# The machine files: `bench --calibrate` with each case's deck, rank count and layout, just before
# its bench runs (VALIDATE_CALIBRATE=case, the default): a shared virtual machine drifts by 10-20 %
# over tens of minutes, and a file measured a quarter of an hour earlier predicts for another
# machine. VALIDATE_CALIBRATE=deck calibrates once per deck and rank count instead, with the first
# case of that deck and rank count (half the time). Per rank count, because on a 2-core machine 4
# ranks share the cores two by two (calibrate scales the per-rank rates by that share); per deck,
# because the memory-bound kernels' rate (kernel_bandwidth_gbs) is measured at the deck's
# activations (tiny's fit a core's 2 MiB L2, small's and 124M's do not: 2-3x apart).
#
# Environment:
#   VALIDATE_OUT      folder for the machine files, logs and results.tsv (default runs/validate/<date>)
#   VALIDATE_MACHINE  one machine file for every case instead of calibrating
#   VALIDATE_CALIBRATE  case (default): calibrate before each case; deck: once per deck and rank count
#   VALIDATE_REPEATS  bench runs per case, the median's time taken (default 3)
#   VALIDATE_PLAN=0   measure only (no plan --machine): the predicted column says "-"
#   VALIDATE_PLAN_BIN the tptrain that runs `plan` (default: the same as bench's)
#   OMP_NUM_THREADS, OPENBLAS_NUM_THREADS  threads per rank (default 1 each)
#   TPTRAIN_BUILD_DIR (default <repo>/build) or TPTRAIN_BIN (the tptrain executable itself)
# The steps per case are few (the bench's step time is the mean of them): about a second of timed
# steps or more (tiny 10, small 4, 124M 2, mixtral-tiny 100, mixtral-small 3), after 1 warm-up step.
# Each case's bench runs VALIDATE_REPEATS times (default 3) and the measured time is the median run's:
# on a shared 2-core virtual machine two runs of the same 2-rank case a minute apart differ by up
# to 17 %.
# A case with expert parallelism is predicted at the routing imbalance its bench measured
# (`plan --expert-imbalance`, the bench's expert_imbalance: the router's state, not the layout's).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=jobs/env.sh
. "$root/jobs/env.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$OMP_NUM_THREADS}
filter=${1:-.}
repeats=${VALIDATE_REPEATS:-3}
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "validate: VALIDATE_REPEATS=$repeats: expected a positive integer" >&2; exit 2; }
per=${VALIDATE_CALIBRATE:-case}
[[ $per == case || $per == deck ]] || { echo "validate: VALIDATE_CALIBRATE=$per: expected case or deck" >&2; exit 2; }

exe=${TPTRAIN_BIN:-${TPTRAIN_BUILD_DIR:-$root/build}/tptrain}
if [ ! -x "$exe" ]; then
  echo "validate: no tptrain executable at $exe: build first: jobs/build.sh" >&2
  exit 2
fi
py=$(command -v python3 || echo /usr/bin/python3)
out=${VALIDATE_OUT:-$root/runs/validate/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
results=$out/results.tsv
: >"$results"

# The value of key $2 in the last JSON object of file $1 that has it ("" if none).
json_value() {
  "$py" - "$1" "$2" <<'PY'
import json, sys
dec, value = json.JSONDecoder(), ""
for line in open(sys.argv[1], errors="replace"):
    i = line.find("{")
    if i < 0:
        continue
    try:
        o = dec.raw_decode(line[i:].strip())[0]
    except ValueError:
        continue
    if isinstance(o, dict) and sys.argv[2] in o:
        value = o[sys.argv[2]]
print(value)
PY
}

tiny=$root/input/bench/tiny.toml small=$root/input/bench/small.toml m124=$root/input/bench/gpt2-124m.toml
mixtral_tiny=$root/input/mixtral-tiny.toml mixtral_small=$root/input/bench/mixtral-small.toml
# name | deck | steps | the --set arguments of the layout (ranks = tensor x context x pipeline x data)
cases=(
  "tiny 1 rank|$tiny|10|"
  "tiny tensor 2|$tiny|10|parallel.tensor=2"
  "tiny pipeline 2|$tiny|10|parallel.pipeline=2 training.micro_batch=4"
  "tiny pipeline 2 x 2 virtual|$tiny|10|parallel.pipeline=2 parallel.virtual_stages=2 training.micro_batch=4"
  "tiny data 2|$tiny|10|parallel.data=2 training.micro_batch=8"
  "tiny context 2|$tiny|10|parallel.context=2"
  "tiny tensor 2 x pipeline 2|$tiny|10|parallel.tensor=2 parallel.pipeline=2 training.micro_batch=4"
  "tiny data 4|$tiny|10|parallel.data=4 training.micro_batch=4"
  "small 1 rank|$small|4|"
  "small tensor 2|$small|4|parallel.tensor=2"
  "small pipeline 2|$small|4|parallel.pipeline=2 training.micro_batch=2"
  "small pipeline 2 x 3 virtual|$small|4|parallel.pipeline=2 parallel.virtual_stages=3 training.micro_batch=2"
  "small data 2|$small|4|parallel.data=2 training.micro_batch=4"
  "small context 2|$small|4|parallel.context=2"
  "small tensor 2 x data 2|$small|4|parallel.tensor=2 parallel.data=2 training.micro_batch=4"
  "124M 1 rank|$m124|2|"
  "124M tensor 2|$m124|2|parallel.tensor=2"
  "mixtral-tiny expert 2 x data 2|$mixtral_tiny|100|"
  "mixtral-small expert 2 x data 2|$mixtral_small|3|parallel.data=2 parallel.expert=2 training.global_batch=8"
  "mixtral-small expert 4 x data 4|$mixtral_small|3|"
)

# The machine files, by deck and rank count.
declare -A machine
calibrate() {  # $1 = key, $2 = ranks, $3 = deck, $4 = the file's name, then the case's --set arguments
  local key=$1 n=$2 deck=$3 slug=$4 flags
  shift 4
  local file=$out/machine-$slug.toml log=$out/calibrate-$slug.log
  mapfile -t flags < <(mpi_flags "$n")
  echo "== calibrate $(basename "$deck") on $n rank(s): $file" >&2
  if mpiexec -n "$n" "${flags[@]}" "$exe" bench "$deck" "$@" --calibrate "$file" >"$log" 2>&1; then
    machine[$key]=$file
  else
    echo "validate: calibration of $deck on $n rank(s) failed (log: $log)" >&2
    machine[$key]=
  fi
}

# The load beside the run (other jobs on the cores make the measured steps slower than the
# calibration's best-of rates; docs/measurements.md states it with the table).
load() { echo "$1: $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc --all) cores"; }
load start | tee "$out/load.txt" >&2

failed=0
for entry in "${cases[@]}"; do
  IFS='|' read -r name deck steps sets <<<"$entry"
  [[ $name =~ $filter ]] || continue
  args=()
  for s in $sets; do args+=(--set "$s"); done
  if ! ranks=$("$exe" check "$deck" "${args[@]}" --ranks 2>"$out/check.err"); then
    echo "validate: $name: tptrain check failed: $(cat "$out/check.err")" >&2
    failed=1
    continue
  fi
  slug=$(echo "$name" | tr ' ' '-')
  key="$deck|$ranks" file_slug=$(basename "$deck" .toml)-$ranks
  [ "$per" = case ] && key=$name file_slug=$slug
  if [ -n "${VALIDATE_MACHINE:-}" ]; then
    machine[$key]=$VALIDATE_MACHINE
  elif [ -z "${machine[$key]+set}" ]; then
    calibrate "$key" "$ranks" "$deck" "$file_slug" "${args[@]}"
  fi
  mapfile -t flags < <(mpi_flags "$ranks")
  echo "== $name: mpiexec -n $ranks $exe bench $(basename "$deck") ${args[*]} --steps $steps --warmup 1" \
    "(x $repeats)" >&2
  steps_s=()
  for ((run = 1; run <= repeats; ++run)); do
    log=$out/$slug.bench.log
    [ "$run" -gt 1 ] && log=$out/$slug.bench.$run.log
    if mpiexec -n "$ranks" "${flags[@]}" "$exe" bench "$deck" "${args[@]}" --steps "$steps" --warmup 1 >"$log" 2>&1; then
      value=$(json_value "$log" step_s)
      [ -n "$value" ] && steps_s+=("$value")
    fi
  done
  measured=
  [ "${#steps_s[@]}" -eq "$repeats" ] && measured=$(printf '%s\n' "${steps_s[@]}" | sort -g | sed -n "$(((repeats + 1) / 2))p")
  [ -n "$measured" ] || { echo "validate: $name: bench failed (logs: $out/$slug.bench*.log)" >&2; failed=1; }
  predicted=
  if [ "${VALIDATE_PLAN:-1}" != 0 ] && [ -n "${machine[$key]}" ]; then
    # plan exits 1 when the layout does not fit; its JSON line still has the time.
    imbalance=()
    if [ -n "$measured" ]; then
      value=$(json_value "$out/$slug.bench.log" expert_imbalance)
      [ -n "$value" ] && imbalance=(--expert-imbalance "$value")
    fi
    "${VALIDATE_PLAN_BIN:-$exe}" plan "$deck" --machine "${machine[$key]}" "${args[@]}" "${imbalance[@]}" \
      >"$out/$slug.plan.log" 2>&1 || true
    predicted=$(json_value "$out/$slug.plan.log" seconds_per_iteration)
    [ -n "$predicted" ] || { echo "validate: $name: plan printed no seconds_per_iteration (log: $out/$slug.plan.log)" >&2; failed=1; }
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$ranks" "${measured:--}" "${predicted:--}" | tee -a "$results" >&2
done

"$py" - "$results" <<'PY'
import sys
print("| case | ranks | measured s | predicted s | error % |")
print("|---|---:|---:|---:|---:|")
for line in open(sys.argv[1]):
    name, ranks, measured, predicted = line.rstrip("\n").split("\t")
    try:
        error = f"{(float(predicted) / float(measured) - 1) * 100:+.1f}"
    except ValueError:
        error = "-"
    fmt = lambda v: f"{float(v):.4f}" if v != "-" else "-"
    print(f"| {name} | {ranks} | {fmt(measured)} | {fmt(predicted)} | {error} |")
PY
load end | tee -a "$out/load.txt" >&2
echo "validate: logs and machine files in $out" >&2
exit $failed
