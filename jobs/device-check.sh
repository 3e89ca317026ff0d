#!/bin/bash
# The prepared GPU check, for a machine lent with one NVIDIA GPU (e.g. an H200 with CUDA 13 and
# PyTorch), no package registry and a few minutes (at most 10 a command, start included). It runs
# a BUNDLE and builds nothing: tptrain, its test binaries and their libraries, packed where the
# CUDA toolkit, Kokkos and MPI are (docs/cluster.md, "The device check on a bare GPU machine"):
#
#   jobs/check-cuda-build.sh $KOKKOS $KOKKOS build-cuda     # the CUDA build, zero warnings
#   jobs/pack-device-bundle.sh build-cuda device-bundle      # MANIFEST, libraries, tests.tsv
#   jobs/device-check.sh --bundle device-bundle --dry-run    # every library resolves; the plan
#
#   jobs/device-check.sh --bundle DIR [--out DIR] [--work DIR] [--budget S] [--steps N]
#                        [--peak-bf16 TF] [--no-torch] [--test-filter SPEC] [--quick]
#                        [--rehearse] [--dry-run]
#
# Numbers first; each step under `timeout -s KILL` with its own budget (seconds), all of them
# within --budget (default 480: 8 minutes):
#   0. prerequisites  MANIFEST (refused unless CUDA for this GPU's architecture with cuBLAS in
#              Kokkos Kernels), glibc, every library resolved (ldd, the bundle's env.sh), Python,
#              PyTorch, NCCL (without it: MPI fallback, said so); the GPU (nvidia-smi: name,
#              compute capability, clocks) and its nominal dense bf16 peak. A refusal stops here.
#   1. smoke-124m-bf16    30   tptrain bench, GPT-2 124M, bf16, batch 8, 2 steps
#   2. tptrain-1.3b-bf16  150  input/bench/gpt3-1.3b.toml in bf16 (batch 8 in micro-batches of 2,
#      torch-1.3b-bf16    110  sequence 2048), then jobs/bench_torch.py on the deck as tptrain
#                              ran it (`tptrain check --json`): the same batch, micro-batch,
#                              sequence, padded vocabulary and precision (autocast bf16, SDPA)
#   3. tptrain-124m-bf16  45   GPT-2 124M bf16, batch 8, and the same in PyTorch
#      torch-124m-bf16    45
#   4. test-NAME          rest the bundle's tests.tsv (^unit: the suite on Kokkos::Cuda, unit_serial)
# A failing or killed step is recorded and the next one runs; the exit status is 1 when any step
# failed (the summary names them), 0 otherwise. Skipped steps (no PyTorch, no time left) do not
# fail the run but are listed.
#
# Results, written to --out (default runs/device-check/) the moment they exist, so that a run
# killed at the device tool's limit still returns them (few files, names the tool returns):
#   summary.txt       rewritten after every step: GPU, clocks, bundle, the table (tokens/s, MFU
#                     against the nominal dense bf16 peak and against the cuBLAS bf16 GEMM peak
#                     measured in the same run, PyTorch beside tptrain), failures
#   results.jsonl     one line per step: status, exit, seconds, budget, the step's JSON result
#   steps.log         every step's output, one after another
#   device-check.log  this script's own output
#   gpu.csv           nvidia-smi samples (SM clock, power, memory) each second, step by step
# Scratch (an unpacked xz bundle, decks, the tests' working folder) goes to --work (default a
# new folder under TMPDIR), never to --out.
#
# --peak-bf16 TF: the dense bf16 peak to use when this GPU's model is not in the table (H200 and
#   H100 SXM 989, H100 NVL 835, H100 PCIe 756, L40S 362, A100 312 TFLOP/s); it overrides the table.
# --test-filter SPEC: a Catch2 test spec added to each test's arguments (default none on a GPU;
#   all: none, also in a rehearsal).
# --quick: 1 timed step, no warm-up, budget 100 s, test filter "[precision][gemm]" (the ctest
#   test's rehearsal).
# --rehearse: the same run on a CPU bundle (jobs/pack-device-bundle.sh build), here: the script
#   re-executes itself under `env -i` with PATH=/usr/bin:/bin behind stubs of mpiexec, mpirun,
#   srun, h5dump, ... that fail the run when called (the GPU machine has none), requires a fresh
#   --out (default a new folder), shrinks the benches to small shapes (--set; the same step names
#   and result files), skips the CUDA checks with a note, runs PyTorch on the CPU when it is
#   importable, and test filter "[kernels]"; budget 300 s.
# --dry-run: the prerequisites alone, then the plan; nothing is run.
# Environment: TPTRAIN_LAUNCH (default empty: one rank without a launcher, an MPI singleton),
# TPTRAIN_CHECK_TESTS (the tests.tsv names to run, an extended regex, default ^unit),
# DEVICE_CHECK_PHASES=1 (`tptrain bench --phases` for the 1.3B step).
# shellcheck disable=SC2015  # `[ A ] && [ B ] || C`: C runs when either test fails, as meant
# shellcheck disable=SC2016  # bash -c '...': expanded by that shell, from its arguments
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
script="$root/jobs/device-check.sh"
orig_args=("$@")

pack_help() {
  cat >&2 <<EOF
device-check: it builds nothing on the GPU machine (a build there takes over 10 minutes and needs
MPI and HDF5). Pack a bundle where CUDA, Kokkos (with Kokkos Kernels and cuBLAS) and MPI are:
  jobs/check-cuda-build.sh \$KOKKOS \$KOKKOS build-cuda
  jobs/pack-device-bundle.sh build-cuda device-bundle
  jobs/device-check.sh --bundle device-bundle --dry-run
and run jobs/device-check.sh --bundle device-bundle there (docs/cluster.md, "The device check on a bare GPU machine").
EOF
}
need() {  # need OPTION ARGS...: a usage error naming the option unless a value follows it
  [ $# -ge 2 ] && [ -n "$2" ] || { echo "device-check: $1 needs a value (--help lists the options)" >&2; exit 2; }
}
bundle="" out="" work="" budget="" steps="" peak_bf16="" torch=1 dry_run=0 rehearse=0 quick=0 test_filter="-"
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) need "$@"; bundle=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    --work) need "$@"; work=$2; shift 2 ;;
    --budget) need "$@"; budget=$2; shift 2 ;;
    --steps) need "$@"; steps=$2; shift 2 ;;
    --peak-bf16) need "$@"; peak_bf16=$2; shift 2 ;;
    --test-filter) need "$@"; test_filter=$2; shift 2 ;;
    --no-torch) torch=0; shift ;;
    --quick) quick=1; shift ;;
    --rehearse) rehearse=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    --build|--kokkos|--kernels|--kokkos-src|--kernels-src)
      echo "device-check: $1 is gone: the check runs a bundle only" >&2; pack_help; exit 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "device-check: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
[ -n "$bundle" ] || { echo "device-check: --bundle DIR is required" >&2; pack_help; exit 2; }
[ -d "$bundle" ] || { echo "device-check: no bundle at $bundle" >&2; pack_help; exit 2; }
for n in "$budget" "$steps" "$peak_bf16"; do
  [ -z "$n" ] || [[ "$n" =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "device-check: '$n' is not a number" >&2; exit 2; }
done

# --- rehearsal: the same script again, in the environment of a bare machine ------------------
if [ "$rehearse" = 1 ] && [ "${DEVICE_CHECK_STRIPPED:-0}" != 1 ]; then
  if [ -z "$out" ]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/device-check-rehearsal.XXXXXX")
  elif [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
    echo "device-check: --rehearse wants a fresh --out: $out is not empty" >&2
    exit 2
  fi
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  bundle=$(cd "$bundle" && pwd)
  [ -n "$work" ] || work=$(mktemp -d "${TMPDIR:-/tmp}/device-check-work.XXXXXX")
  mkdir -p "$work/stub-bin"
  work=$(cd "$work" && pwd)
  # What the GPU machine lacks: a call to any of these fails the rehearsal (forbidden-calls).
  for t in mpiexec mpirun orterun srun prterun h5dump h5ls h5pcc h5cc mpicc mpicxx ompi_info cmake ctest nvcc; do
    cat >"$work/stub-bin/$t" <<EOF
#!/bin/sh
echo "device-check: rehearsal: $t was called (\$*): the GPU machine has none" >&2
echo "$t \$*" >>"$work/forbidden-calls"
exit 127
EOF
    chmod +x "$work/stub-bin/$t"
  done
  echo "device-check: rehearsal: env -i, PATH=$work/stub-bin:/usr/bin:/bin, out $out, work $work"
  args=()
  skip=0
  for a in "${orig_args[@]}"; do  # --out, --bundle and --work as resolved here
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    case "$a" in --out|--bundle|--work) skip=1; continue ;; esac
    args+=("$a")
  done
  exec env -i PATH="$work/stub-bin:/usr/bin:/bin" HOME="$work" TMPDIR="$work" LANG=C.UTF-8 \
    DEVICE_CHECK_STRIPPED=1 ${TPTRAIN_CHECK_TESTS:+TPTRAIN_CHECK_TESTS="$TPTRAIN_CHECK_TESTS"} \
    ${TPTRAIN_LAUNCH:+TPTRAIN_LAUNCH="$TPTRAIN_LAUNCH"} ${DEVICE_CHECK_PHASES:+DEVICE_CHECK_PHASES="$DEVICE_CHECK_PHASES"} \
    /bin/bash "$script" "${args[@]}" --bundle "$bundle" --out "$out" --work "$work"
fi

# --- defaults -----------------------------------------------------------------------------------
if [ "$quick" = 1 ]; then
  budget=${budget:-100} steps=${steps:-1} warmup=0
  [ "$test_filter" != - ] || test_filter="[precision][gemm]"
elif [ "$rehearse" = 1 ]; then
  budget=${budget:-300} steps=${steps:-2} warmup=1
  [ "$test_filter" != - ] || test_filter="[kernels]"
else
  budget=${budget:-480} steps=${steps:-3} warmup=1
fi
[ "$test_filter" != - ] && [ "$test_filter" != all ] || test_filter=""
out=${out:-$root/runs/device-check}
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
made_work=0  # a scratch folder of our own (an unpacked bundle is over 100 MiB): removed at exit
if [ -z "$work" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/device-check-work.XXXXXX") || exit 1
  made_work=1
fi
mkdir -p "$work" && work=$(cd "$work" && pwd)
bundle=$(cd "$bundle" && pwd)
case "$work/" in "$out"/*) echo "device-check: --work must not be inside --out" >&2; exit 2 ;; esac
start=$SECONDS
deadline=$((start + ${budget%.*}))

# The result files, fresh; this script's output also goes to device-check.log as it comes.
for f in summary.txt results.jsonl steps.log device-check.log gpu.csv; do : >"$out/$f"; done
exec > >(tee -a "$out/device-check.log") 2>&1
[ "$rehearse" = 1 ] || export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
# shellcheck disable=SC2206  # split on purpose: "srun -n 1" is a command and its arguments
launch=(${TPTRAIN_LAUNCH:-})
sampler=""
cleanup() {
  [ -z "$sampler" ] || kill "$sampler" 2>/dev/null
  [ "$made_work" = 0 ] || rm -rf "$work"
}
trap cleanup EXIT

say() { echo "device-check: $*"; }
section() { echo; echo "=== device-check: $1 ($(date -u +%H:%M:%S), $((SECONDS - start)) s) ==="; }
# record KEY=VALUE...: one line of results.jsonl (values are strings; n:KEY=VALUE a number,
# j:KEY=FILE the last JSON line in FILE that starts with {"bench" or {"torch"; null when none).
record() {
  python3 - "$@" >>"$out/results.jsonl" <<'EOF'
import json, sys
rec = {}
for arg in sys.argv[1:]:
    key, _, value = arg.partition("=")
    if key.startswith("n:"):
        try:
            rec[key[2:]] = float(value) if "." in value else int(value)
        except ValueError:
            rec[key[2:]] = None
    elif key.startswith("j:"):
        found = None
        try:
            for line in open(value, errors="replace"):
                if line.startswith('{"bench"') or line.startswith('{"torch"'):
                    try:
                        found = json.loads(line)
                    except ValueError:
                        pass
        except OSError:
            pass
        rec[key[2:]] = found
    else:
        rec[key] = value
print(json.dumps(rec), flush=True)
EOF
}
summarize() {  # summary.txt from results.jsonl (atomic, so a kill never leaves half a file)
  python3 "$root/jobs/device_check_summary.py" "$out/results.jsonl" "$out/gpu.csv" >"$out/.summary.txt.new" 2>&1 &&
    mv -f "$out/.summary.txt.new" "$out/summary.txt"
}

section prerequisites
command -v python3 >/dev/null 2>&1 || { say "python3 is missing: it writes the results (and runs PyTorch)"; exit 1; }
if [ "$rehearse" = 1 ]; then
  say "rehearsal: stripped environment: PATH=$PATH"
  for t in mpiexec mpirun h5dump; do
    printf '  %-12s %s\n' "$t" "$(command -v "$t" || echo none)"
  done
fi
refusals=()  # reasons not to run: a bundle the GPU cannot use, a library that does not resolve
notes=()     # said in the summary, do not stop the run
[ -f "$bundle/MANIFEST" ] && [ -f "$bundle/env.sh" ] ||
  { say "$bundle is not a bundle of jobs/pack-device-bundle.sh (no MANIFEST or env.sh)"; pack_help; exit 1; }
manifest() { sed -n "s/^$1=//p" "$bundle/MANIFEST" | head -n 1; }
if [ "$(manifest compressed)" = xz ]; then  # unpacked into the work folder
  rm -rf "$work/bundle"
  cp -r "$bundle" "$work/bundle"
  find "$work/bundle" -name '*.xz' -print0 | xargs -0 -r python3 -c '
import lzma, os, shutil, sys
for packed in sys.argv[1:]:
    with lzma.open(packed) as src, open(packed[:-3], "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copymode(packed, packed[:-3])
    os.remove(packed)' || { say "could not unpack the xz files of $bundle"; exit 1; }
  say "bundle unpacked (xz) into $work/bundle"
  bundle="$work/bundle"
fi
[ -x "$bundle/bin/tptrain-bin" ] && [ -x "$bundle/bin/tptrain" ] || { say "$bundle has no bin/tptrain"; exit 1; }
exe="$bundle/bin/tptrain"
backends=$(manifest kokkos_backends) cuda_arch=$(manifest cuda_arch) tpls=$(manifest kernels_tpls) nccl=$(manifest nccl)
echo "  bundle       $bundle: tptrain $(manifest commit), built $(manifest created) in $(manifest build_dir)"
echo "  kokkos       $(manifest kokkos_version): backends ${backends:-?}, arch $(manifest kokkos_arch)${cuda_arch:+ (sm_$cuda_arch)}; Kokkos Kernels TPLs ${tpls:-?}"
[ -n "$backends" ] || refusals+=("its MANIFEST does not name the Kokkos backends (packed before they were recorded): pack it again")

# The GPU: name, compute capability, clocks (the peak table needs the name).
gpu_name="none" gpu_cc="" gpu_line=""
if command -v nvidia-smi >/dev/null 2>&1; then
  q=name,compute_cap,memory.total,driver_version,clocks.max.sm,clocks.sm,clocks.max.memory,power.limit
  if gpu_line=$(timeout -s KILL 30 nvidia-smi --query-gpu=$q --format=csv,noheader 2>&1 | sed -n 1p) &&
     [ "$(tr -cd , <<<"$gpu_line" | wc -c)" -ge 7 ]; then
    gpu_name=$(cut -d, -f1 <<<"$gpu_line" | sed 's/^ *//; s/ *$//')
    gpu_cc=$(cut -d, -f2 <<<"$gpu_line" | tr -d ' .')
  else
    gpu_name=$(timeout -s KILL 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sed -n 1p)
    gpu_name=${gpu_name:-unknown (nvidia-smi: $gpu_line)}
    gpu_cc=$(timeout -s KILL 30 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | sed -n 1p | tr -d ' .')
    [[ "$gpu_cc" =~ ^[0-9]+$ ]] || gpu_cc=""
  fi
  [ -n "$gpu_cc" ] || notes+=("nvidia-smi gave no compute capability: the bundle's cuda_arch is not checked against the GPU")
  echo "  gpu          $gpu_line"
elif [ "$rehearse" = 1 ]; then
  gpu_name="rehearsal: none"
  echo "  gpu          rehearsal: none (no nvidia-smi)"
else
  echo "  gpu          none: nvidia-smi is missing (the NVIDIA driver)"
  refusals+=("no GPU: nvidia-smi is missing (the NVIDIA driver)")
fi

# The bundle must be a CUDA build for this GPU with cuBLAS as Kokkos Kernels' GEMM.
if [ "$rehearse" = 1 ]; then
  notes+=("rehearsal: the CUDA checks (backend CUDA, sm_ of the GPU, cuBLAS in Kokkos Kernels) are skipped: this bundle is ${backends:-?}; a GPU run refuses it")
  say "${notes[-1]}"
else
  [[ " $backends " == *" CUDA "* ]] || refusals+=("the bundle is not a CUDA build (Kokkos backends: ${backends:-?})")
  if [ -z "$cuda_arch" ]; then
    refusals+=("its MANIFEST names no CUDA architecture (cuda_arch)")
  elif [ -n "$gpu_cc" ] && [ "$gpu_cc" != "$cuda_arch" ]; then
    refusals+=("the bundle is built for sm_$cuda_arch, this GPU ($gpu_name) is sm_$gpu_cc: pack one with its Kokkos_ARCH")
  fi
  [[ " $tpls " == *" CUBLAS "* ]] || refusals+=("Kokkos Kernels has no cuBLAS (TPLs: ${tpls:-?}): its GEMMs would not be cuBLAS's (KokkosKernels_ENABLE_TPL_CUBLAS=ON)")
fi
if [ "$nccl" = ON ]; then
  echo "  nccl         in the bundle (the machine's libnccl)"
else
  notes+=("no NCCL in this bundle: device collectives fall back to MPI (host-staged); one rank runs none, so the figures are unaffected")
  echo "  nccl         ${notes[-1]}"
fi

# Its environment (env.sh: LD_LIBRARY_PATH with its libraries, OPAL_PREFIX) is its programs'
# alone: Python and PyTorch keep the machine's libraries.
# shellcheck source=/dev/null  # written by jobs/pack-device-bundle.sh
in_env() { (. "$bundle/env.sh" && exec "$@"); }
glibc_have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
glibc_need=$(manifest glibc_min)
if [ -n "$glibc_need" ] && [ "$(printf '%s\n%s\n' "$glibc_need" "${glibc_have:-0}" | sort -V | head -n 1)" != "$glibc_need" ]; then
  refusals+=("glibc ${glibc_have:-unknown} here, the bundle needs >= $glibc_need (pack it on an older system)")
fi
printf '  %-12s %s (the bundle needs >= %s)\n' glibc "${glibc_have:-unknown}" "${glibc_need:-?}"
# Every library of every program resolves, from the bundle or the machine's glibc and CUDA.
system_re='^(ld-linux[^/]*|linux-vdso|libc|libm|libdl|libpthread|librt|libresolv|libutil|libmvec)\.so'
cuda_re='^lib(cuda|cudart|cublas|cublasLt|nccl|nvrtc|nvJitLink|cufft|curand|cusparse|cusolver|nvidia-[a-z-]*)\.so'
bundle_real=$(cd "$bundle" && pwd -P)
for f in "$bundle"/bin/*; do
  [ "$(head -c 4 "$f" | tail -c 3)" = ELF ] || continue
  deps=$(in_env ldd "$f" 2>&1) || true  # a static program: "not a dynamic executable"
  unresolved=$(awk '/not found/ {print $1}' <<<"$deps" | sort -u | tr '\n' ' ')
  [ -z "$unresolved" ] || refusals+=("$(basename "$f") needs libraries not found: $unresolved(CUDA ones: CUDA_HOME/lib64 or PyTorch's nvidia-* wheels; libcuda: the driver)")
  outside=$(awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$deps" | while read -r so path; do
      [[ "$so" =~ $system_re || "$so" =~ $cuda_re ]] && continue
      real=$(readlink -f "$path")
      [[ "$real" == "$bundle_real"/* ]] || printf '%s ' "$so"
    done)
  if [ -n "$outside" ]; then
    if [ "$rehearse" = 1 ]; then
      refusals+=("$(basename "$f") loads from outside the bundle: $outside(the bundle is not self-contained)")
    else
      notes+=("$(basename "$f") loads the machine's $outside")
    fi
  fi
done
for soname in $(manifest cuda_libraries); do
  printf '  %-12s %s\n' "${soname%%.so*}" "$(in_env ldd "$bundle/bin/tptrain-bin" 2>/dev/null | awk -v s="$soname" '$1 == s {print $3}')"
done
version=$(timeout -s KILL 60 bash -c '. "$1/env.sh" && exec "$2" --version' _ "$bundle" "$exe" 2>&1 | head -n 3)
echo "  tptrain      $(head -n 1 <<<"$version")"

torch_ok=0 torch_version="" torch_device=cpu
[ "$rehearse" = 1 ] || torch_device=cuda
if [ "$torch" = 0 ]; then
  echo "  torch        --no-torch"
elif torch_version=$(timeout -s KILL 60 python3 -c "
import sys, torch
ok = '$torch_device' == 'cpu' or torch.cuda.is_available()
print(torch.__version__, 'CUDA', torch.version.cuda, 'on Python', sys.version.split()[0], '' if ok else '(no CUDA device)')
sys.exit(0 if ok else 1)" 2>/dev/null); then
  torch_ok=1
  echo "  torch        $torch_version"
else
  echo "  torch        not importable${torch_version:+ with CUDA ($torch_version)}: the PyTorch steps are skipped"
  notes+=("PyTorch not importable${torch_version:+ with CUDA}: no comparison")
fi

# The tests read the source tree's data at the path they were built with; point that path at
# this checkout when nothing is there (the machine is bare; root may create it).
source_dir=$(manifest source_dir)
if [ -n "$source_dir" ] && [ ! -e "$source_dir" ]; then
  if [ "$dry_run" = 0 ] && mkdir -p "$(dirname "$source_dir")" 2>/dev/null && ln -s "$root" "$source_dir" 2>/dev/null; then
    echo "  sources      $source_dir -> $root (the tests' built-in data path)"
  else
    notes+=("the tests' data path $source_dir is absent and cannot be made: tests that read tests/data fail")
  fi
elif [ -n "$source_dir" ] && [ "$(cd "$source_dir" && pwd -P)" != "$(cd "$root" && pwd -P)" ]; then
  echo "  sources      the tests read $source_dir, not this checkout ($root)"
fi

record step=machine status="$([ ${#refusals[@]} -eq 0 ] && echo ok || echo refused)" gpu="$gpu_name" gpu_query="$gpu_line" gpu_cc="$gpu_cc" \
  peak_bf16_tflops="$peak_bf16" rehearsal="$rehearse" quick="$quick" budget_s="$budget" \
  bundle="$bundle" commit="$(manifest commit)" kokkos_backends="$backends" kokkos_arch="$(manifest kokkos_arch)" \
  cuda_arch="$cuda_arch" kernels_tpls="$tpls" nccl="$nccl" glibc="$glibc_have" glibc_min="$glibc_need" \
  torch="${torch_version:-none}" tptrain_version="$(head -n 1 <<<"$version")" \
  refusals="$(printf '%s\n' ${refusals[@]+"${refusals[@]}"})" notes="$(printf '%s\n' ${notes[@]+"${notes[@]}"})"
summarize
if [ ${#refusals[@]} -gt 0 ]; then
  for r in "${refusals[@]}"; do say "REFUSED: $r"; done
  if [ "$dry_run" = 0 ]; then
    say "FAILED: the bundle cannot run here (above; $out/summary.txt)"
    exit 1
  fi
fi

# --- the steps ------------------------------------------------------------------------------
# Benchmark shapes: the decks on a GPU; in a rehearsal, small ones with the same step names.
deck124="$root/input/bench/gpt2-124m.toml" deck13="$root/input/bench/gpt3-1.3b.toml"
set124=(--set training.global_batch=8 --set training.micro_batch=8 --set training.precision=bf16)
set13=(--set training.precision=bf16)
if [ "$rehearse" = 1 ]; then
  small=(--set model.layers=2 --set model.heads=4 --set model.vocab_size=512)
  set124+=("${small[@]}" --set model.hidden=64 --set model.ffn_hidden=256 --set model.seq_length=64
           --set training.global_batch=2 --set training.micro_batch=2)
  set13+=("${small[@]}" --set model.hidden=128 --set model.ffn_hidden=512 --set model.seq_length=128
          --set training.global_batch=4 --set training.micro_batch=2)
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1  # tptrain and PyTorch alike, one core each
fi
phases=()
[ "${DEVICE_CHECK_PHASES:-0}" = 1 ] && phases=(--phases)
tests_re=${TPTRAIN_CHECK_TESTS:-^unit}

if [ "$dry_run" = 1 ]; then
  section "dry run: the plan (budget $budget s)"
  echo "smoke-124m-bf16   30 s: tptrain bench gpt2-124m ${set124[*]} --steps 2 --warmup 1"
  echo "tptrain-1.3b-bf16 150 s: tptrain bench gpt3-1.3b ${set13[*]} --steps $steps --warmup $warmup"
  [ "$torch_ok" = 1 ] && echo "torch-1.3b-bf16   110 s: jobs/bench_torch.py --resolved (tptrain check --json) --device $torch_device"
  echo "tptrain-124m-bf16 45 s, torch-124m-bf16 45 s: the same for gpt2-124m"
  echo "tests (tests.tsv, names matching $tests_re${test_filter:+, Catch2 filter $test_filter}), the time left:"
  awk -F '\t' -v re="$tests_re" '$1 ~ re { printf "  test-%s: %s %s (at most %s s)\n", $1, $4, $5, $2 }' "$bundle/tests.tsv"
  record step=end status="$([ ${#refusals[@]} -eq 0 ] && echo ok || echo refused)" n:seconds=$((SECONDS - start)) \
    dry_run=yes
  summarize
  exit 0
fi

# The GPU's clocks, power and memory each second, with a marker line before each step.
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "# timestamp, clocks.sm MHz, clocks.mem MHz, power.draw W, temperature.gpu C, utilization.gpu %, memory.used MiB" >>"$out/gpu.csv"
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,memory.used \
    --format=csv,noheader,nounits -lms 1000 >>"$out/gpu.csv" 2>/dev/null &
  sampler=$!
else
  echo "# rehearsal: none (no nvidia-smi): no GPU samples" >>"$out/gpu.csv"
fi

failed=() skipped=()
# run_step NAME BUDGET KIND COMMAND...: COMMAND under `timeout -s KILL` for at most BUDGET s (less
# when the run's budget is nearly spent), its output appended to steps.log as it comes; then its
# line in results.jsonl and a new summary.txt. KIND: bench, torch or test.
run_step() {
  local name=$1 want=$2 kind=$3
  shift 3
  local left=$((deadline - SECONDS - 5)) b=$want
  [ "$left" -lt "$b" ] && b=$left
  if [ "$b" -lt 5 ]; then
    section "$name"
    say "$name skipped: the run's budget of $budget s is spent"
    skipped+=("$name")
    record step="$name" kind="$kind" status=skipped note="no time left of the run's $budget s" n:budget_s=0
    summarize
    return 0
  fi
  section "$name (budget $b s)"
  echo "# step $name $(date -u +%H:%M:%S)" >>"$out/gpu.csv"
  local shown=("$@")  # the command without the wrapper that gives it the bundle's environment
  if [ "$1" = bash ] && [ "$2" = -c ]; then
    shown=("${@:6}")
    [ "${shown[0]}" != "$work/tests" ] || shown=("${shown[@]:1}")
  fi
  printf '\n=== %s (budget %s s): %s\n' "$name" "$b" "${shown[*]}" >>"$out/steps.log"
  local t0=$SECONDS rc status
  timeout -s KILL "$b" "$@" </dev/null 2>&1 | tee -a "$out/steps.log" >"$work/$name.log"
  rc=${PIPESTATUS[0]}
  local took=$((SECONDS - t0))
  if [ "$rc" = 0 ]; then status=ok
  elif [ "$rc" = 137 ] && [ "$took" -ge "$((b - 1))" ]; then status=killed
  else status=failed; fi
  [ "$status" = ok ] || failed+=("$name")
  local tail_line
  tail_line=$(grep -E 'test cases|All tests passed|error:|Error' "$work/$name.log" | tail -n 1)
  [ -n "$tail_line" ] || tail_line=$(grep -v '^[[:space:]]*$' "$work/$name.log" | tail -n 1 | cut -c1-300)
  printf '=== %s: %s (exit %s, %s s)\n' "$name" "$status" "$rc" "$took" >>"$out/steps.log"
  say "$name: $status (exit $rc, $took s of $b)"
  record step="$name" kind="$kind" status="$status" n:exit="$rc" n:seconds="$took" n:budget_s="$b" \
    command="${shown[*]}" last_line="$tail_line" j:result="$work/$name.log"
  summarize
}
skip_step() {  # skip_step NAME KIND REASON
  skipped+=("$1")
  say "$1 skipped: $3"
  record step="$1" kind="$2" status=skipped note="$3"
  summarize
}
# A bundle program in the bundle's environment, as a command that timeout can run.
in_bundle=(bash -c '. "$1/env.sh" && shift && exec "$@"' _ "$bundle")
torch_step() {  # torch_step NAME BUDGET STEPS DECK SETS...: PyTorch on the deck as tptrain runs it
  local name=$1 want=$2 n=$3 deck=$4
  shift 4
  if [ "$torch_ok" != 1 ]; then
    skip_step "$name" torch "PyTorch not importable${torch_version:+ with CUDA}"
    return 0
  fi
  if ! timeout -s KILL 60 "${in_bundle[@]}" "$exe" check "$deck" "$@" --json \
       >"$work/$name.deck.json" 2>"$work/$name.deck.err" </dev/null; then
    failed+=("$name")
    say "$name: tptrain check --json failed: $(tail -n 2 "$work/$name.deck.err")"
    record step="$name" kind=torch status=failed note="tptrain check --json failed: $(tail -n 2 "$work/$name.deck.err")"
    summarize
    return 0
  fi
  run_step "$name" "$want" torch env PYTHONUNBUFFERED=1 python3 "$root/jobs/bench_torch.py" \
    --resolved "$work/$name.deck.json" --name "$name" --device "$torch_device" --steps "$n" --warmup "$warmup" \
    --threads "${OMP_NUM_THREADS:-8}"
}
bench=("${in_bundle[@]}" ${launch[@]+"${launch[@]}"} "$exe" bench)

cd "$work" || exit 1
run_step smoke-124m-bf16 30 bench "${bench[@]}" "$deck124" "${set124[@]}" \
  --steps "$([ "$quick" = 1 ] && echo 1 || echo 2)" --warmup "$warmup"
run_step tptrain-1.3b-bf16 150 bench "${bench[@]}" "$deck13" "${set13[@]}" --steps "$steps" --warmup "$warmup" \
  ${phases[@]+"${phases[@]}"}
torch_step torch-1.3b-bf16 110 "$steps" "$deck13" "${set13[@]}"
run_step tptrain-124m-bf16 45 bench "${bench[@]}" "$deck124" "${set124[@]}" --steps "$((steps + 2))" --warmup "$warmup"
torch_step torch-124m-bf16 45 "$((steps + 2))" "$deck124" "${set124[@]}"

# The tests: ctest's list as the bundle carries it (name, timeout, environment, program, args),
# each in the time left (at most its ctest TIMEOUT).
mkdir -p "$work/tests"
ran=0
while IFS=$'\t' read -r name timeout_s envs program args; do
  [[ "$name" =~ $tests_re ]] || continue
  ran=$((ran + 1))
  env_list=()
  [ "$envs" = - ] || IFS=';' read -r -a env_list <<<"$envs"
  # shellcheck disable=SC2206  # the arguments as ctest split them (none hold blanks)
  arg_list=($args)
  [ -z "$test_filter" ] || arg_list+=("$test_filter")
  run_step "test-$name" "$timeout_s" test bash -c 'cd "$2" && . "$1/env.sh" && shift 2 && exec "$@"' _ \
    "$bundle" "$work/tests" env ${env_list[@]+"${env_list[@]}"} "$bundle/$program" ${arg_list[@]+"${arg_list[@]}"}
done <"$bundle/tests.tsv"
if [ "$ran" = 0 ]; then
  failed+=("tests")
  record step=tests kind=test status=failed note="no test of the bundle's tests.tsv matches $tests_re"
fi

if [ -s "$work/forbidden-calls" ]; then
  failed+=("stripped-environment")
  record step=stripped-environment kind=rehearsal status=failed note="called what the GPU machine lacks: $(cut -d' ' -f1 "$work/forbidden-calls" | sort -u | tr '\n' ' ')"
elif [ "$rehearse" = 1 ]; then
  record step=stripped-environment kind=rehearsal status=ok note="nothing called mpiexec, mpirun, srun, h5dump, cmake, ..."
fi
cleanup
sampler=""
record step=end status="$([ ${#failed[@]} -eq 0 ] && echo ok || echo failed)" n:seconds=$((SECONDS - start)) \
  failed="${failed[*]:-}" skipped="${skipped[*]:-}"
summarize
section summary
cat "$out/summary.txt"
if [ ${#failed[@]} -gt 0 ]; then
  say "FAILED: ${failed[*]} ($((SECONDS - start)) s; $out)"
  exit 1
fi
say "OK in $((SECONDS - start)) s${skipped[*]:+ (skipped: ${skipped[*]})} ($out)"
