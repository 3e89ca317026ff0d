#!/bin/bash
# The prepared GPU check, for a machine with one NVIDIA GPU (e.g. an H200 with 16 cores) and no
# internet; about 5 minutes with a prebuilt tptrain, under 8 with a prebuilt Kokkos:
#
#   0. prerequisites  each tool found or missing (with what provides it), NCCL and PyTorch
#              found or not; a missing required tool stops here, before anything is built
#   1. gpu     what the machine has (nvidia-smi, nvcc)
#   2. build   tptrain for CUDA (jobs/check-cuda-build.sh with TPTRAIN_WARNINGS=report: warnings
#              are listed, not fatal, since this run measures; without NCCL it builds with
#              TPTRAIN_ENABLE_NCCL=OFF and says so), unless --build gives
#              an existing CUDA build of it; Kokkos comes from --kokkos PREFIX (an install with
#              CUDA; Kokkos Kernels there too, or at --kernels PREFIX), or is built first from
#              sources placed beside the repository
#              (../kokkos and ../kokkos-kernels, or --kokkos-src/--kernels-src)
#   3. tests   ctest on the CUDA backend: `unit` (the whole single-rank suite on Kokkos::Cuda,
#              collectives on NCCL) and `unit_serial` (kernels and layers on Kokkos::Serial)
#   4. bench   `tptrain bench` for GPT-2 124M and the GPT-3 1.3B shape (L24 H2048 A16 S2048) at
#              tensor 1, fp32 and bf16, and the same steps in PyTorch when it is importable with
#              CUDA: the deck as tptrain ran it (`tptrain check --json`), so the same batch,
#              micro-batches and precision (bf16 under autocast), eager with SDPA attention
#   5. summary tokens/s; MFU against the GPU's dense peak (--peak-fp32 / --peak-bf16 TFLOP/s;
#              H200/H100 SXM: 67 / 989) and against the cuBLAS GEMM rate measured in the same run
#
#   jobs/device-check.sh [--build DIR] [--kokkos PREFIX [--kernels PREFIX]] [--kokkos-src DIR]
#                        [--kernels-src DIR] [--out DIR] [--steps N] [--peak-fp32 TF]
#                        [--peak-bf16 TF] [--no-torch]
#
# Every step prints its name first; the first one that fails ends the script with
# "device-check: FAILED at step <name>" and exit status 1, so a half-run check cannot pass as a
# whole one. Logs and JSON lines go to --out (default runs/device-check/).
# Environment: TPTRAIN_LAUNCH (default empty: one rank started without a launcher, as MPI's
# singleton; e.g. "srun -n 1" or "mpiexec -n 1"), CUDA_HOME (default /usr/local/cuda),
# TPTRAIN_CHECK_TESTS (the ctest -R regex of step 3, default ^unit), DEVICE_CHECK_PHASES (1 =
# `tptrain bench --phases`: as many steps again timed phase by phase, fenced at every phase
# boundary; tokens/s and MFU come from the unfenced steps either way).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

build="" kokkos="" kernels="" kokkos_src="$root/../kokkos" kernels_src="$root/../kokkos-kernels"
out="$root/runs/device-check" steps=3 peak_fp32=67 peak_bf16=989 torch=1
need() {  # need OPTION ARGS...: a usage error naming the option unless a value follows it
  [ $# -ge 2 ] && [ -n "$2" ] || { echo "device-check: $1 needs a value (--help lists the options)" >&2; exit 2; }
}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) need "$@"; build=$2; shift 2 ;;
    --kokkos) need "$@"; kokkos=$2; shift 2 ;;
    --kernels) need "$@"; kernels=$2; shift 2 ;;
    --kokkos-src) need "$@"; kokkos_src=$2; shift 2 ;;
    --kernels-src) need "$@"; kernels_src=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    --steps) need "$@"; steps=$2; shift 2 ;;
    --peak-fp32) need "$@"; peak_fp32=$2; shift 2 ;;
    --peak-bf16) need "$@"; peak_bf16=$2; shift 2 ;;
    --no-torch) torch=0; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "device-check: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PATH="${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
jobs=$(nproc 2>/dev/null || echo 4)
# shellcheck disable=SC2206  # split on purpose: "srun -n 1" is a command and its arguments
launch=(${TPTRAIN_LAUNCH:-})

current="setup"
step() {  # step NAME: announce it; a failure from here on names it
  current=$1
  echo
  echo "=== device-check: $current ($(date -u +%H:%M:%S)) ==="
}
# shellcheck disable=SC2154  # rc is assigned inside the trap
trap 'rc=$?; [ $rc -eq 0 ] || echo "device-check: FAILED at step $current (exit $rc); logs in $out" >&2' EXIT
start=$SECONDS

step prerequisites
# What a bare GPU machine must bring (nothing is installed from here: such a machine has no
# package registry). Required: the GPU driver, the CUDA toolkit, CMake, a C++17 host compiler, MPI
# and parallel HDF5, and tptrain's header libraries (toml++, CLI11, fmt, nlohmann-json, PCRE2,
# Catch2), found by CMake at configure (README, "Building on a cluster", names each module or
# Spack package); Kokkos and Kokkos Kernels as --kokkos PREFIX or sources (see above).
# Optional: NCCL (without it the collectives fall back to MPI, loudly) and Python with PyTorch
# (the comparison runs).
missing=0
need_tool() {  # need_tool NAME WHAT: found or missing, with what provides it
  if command -v "$1" >/dev/null 2>&1; then printf '  %-12s %s\n' "$1" "$(command -v "$1")"
  else printf '  %-12s MISSING: %s\n' "$1" "$2"; missing=1; fi
}
need_tool nvidia-smi "the NVIDIA driver"
if [ -z "$build" ]; then  # building here; a prebuilt --build needs only the driver
  need_tool nvcc "the CUDA toolkit (CUDA_HOME, default /usr/local/cuda)"
  need_tool cmake "CMake >= 3.16 (pip install cmake)"
  need_tool "${CXX:-g++}" "a C++17 host compiler (CXX)"
  need_tool mpicxx "MPI (module load openmpi; spack install openmpi)"
fi
nccl_header=""
for d in "${NCCL_ROOT:-}" "${CUDA_HOME:-/usr/local/cuda}" /usr /usr/local; do
  [ -n "$d" ] && [ -f "$d/include/nccl.h" ] && { nccl_header="$d/include/nccl.h"; break; }
done
if [ -n "$nccl_header" ]; then
  echo "  nccl         $nccl_header"
else
  echo "  nccl         NOT FOUND (NCCL_ROOT, CUDA_HOME/include, /usr/include): device collectives fall back to MPI"
fi
if python3 -c "import torch" >/dev/null 2>&1; then
  echo "  torch        $(python3 -c 'import sys, torch; print(torch.__version__, "on Python", sys.version.split()[0])')"
else
  echo "  torch        not importable: no PyTorch comparison"
fi
[ "$missing" = 0 ] || { echo "device-check: required tools are missing (above)" >&2; exit 1; }

step gpu
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader ||
  { echo "device-check: nvidia-smi found no GPU" >&2; exit 1; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
nvcc --version | tail -n 2 || echo "(nvcc not on PATH: only a prebuilt --build can run)"

if [ -z "$build" ]; then
  if [ -z "$kokkos" ]; then
    step build-kokkos
    # Kokkos and Kokkos Kernels (CUDA 13 needs Kokkos >= 4.7.01) from the source trees beside the
    # repository: CUDA + Serial, the architecture of this GPU (also as -arch for nvcc_wrapper,
    # whose default sm_70 CUDA 13 rejects), cuBLAS as Kokkos Kernels' GEMM.
    [ -f "$kokkos_src/CMakeLists.txt" ] && [ -f "$kernels_src/CMakeLists.txt" ] ||
      { echo "device-check: no Kokkos sources at $kokkos_src and $kernels_src (or give --kokkos PREFIX / --build DIR)" >&2; exit 1; }
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d .)
    case "$cc" in
      90) arch=Kokkos_ARCH_HOPPER90 ;; 80) arch=Kokkos_ARCH_AMPERE80 ;; 89) arch=Kokkos_ARCH_ADA89 ;;
      100) arch=Kokkos_ARCH_BLACKWELL100 ;; *) echo "device-check: compute capability $cc: add its Kokkos_ARCH" >&2; exit 1 ;;
    esac
    kokkos="$out/kokkos-install"
    cmake -S "$kokkos_src" -B "$out/kokkos-build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=17 \
      -DCMAKE_CXX_COMPILER="$kokkos_src/bin/nvcc_wrapper" -DCMAKE_CXX_FLAGS="-arch=sm_$cc" -DCMAKE_INSTALL_PREFIX="$kokkos" \
      -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_SERIAL=ON -D$arch=ON -DBUILD_SHARED_LIBS=ON >"$out/kokkos.log" 2>&1
    cmake --build "$out/kokkos-build" -j "$jobs" >>"$out/kokkos.log" 2>&1
    cmake --install "$out/kokkos-build" >>"$out/kokkos.log" 2>&1
    cmake -S "$kernels_src" -B "$out/kernels-build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_COMPILER="$kokkos_src/bin/nvcc_wrapper" -DCMAKE_CXX_FLAGS="-arch=sm_$cc" \
      -DCMAKE_INSTALL_PREFIX="$kokkos" -DKokkos_ROOT="$kokkos" \
      -DKokkosKernels_ENABLE_TPL_CUBLAS=ON -DKokkosKernels_ENABLE_TPL_BLAS=ON \
      -DKokkosKernels_ENABLE_ALL_COMPONENTS=OFF -DKokkosKernels_ENABLE_COMPONENT_BLAS=ON \
      -DKokkosKernels_ADD_DEFAULT_ETI=OFF -DBUILD_SHARED_LIBS=ON >"$out/kernels.log" 2>&1
    cmake --build "$out/kernels-build" -j "$jobs" >>"$out/kernels.log" 2>&1
    cmake --install "$out/kernels-build" >>"$out/kernels.log" 2>&1
  fi
  step build-tptrain
  build="$out/build-cuda"
  cmake_args=${TPTRAIN_CMAKE_ARGS:-}
  if [ -z "$nccl_header" ]; then
    echo "device-check: WARNING: no NCCL: building with TPTRAIN_ENABLE_NCCL=OFF; every collective goes through MPI (host-staged), so the figures below are not NCCL's" >&2
    cmake_args="$cmake_args -DTPTRAIN_ENABLE_NCCL=OFF"
  fi
  # Warnings are reported, not fatal: this run measures; jobs/check-cuda-build.sh alone is the gate.
  TPTRAIN_WARNINGS=report TPTRAIN_CMAKE_ARGS="$cmake_args" TPTRAIN_BUILD_JOBS=$jobs \
    "$root/jobs/check-cuda-build.sh" "$kokkos" "${kernels:-$kokkos}" "$build"
fi
build=$(cd "$build" && pwd)
exe="$build/tptrain"
[ -x "$exe" ] || { echo "device-check: no tptrain executable in $build" >&2; exit 1; }
"$exe" --version

step tests
# Single-process entries only: one GPU cannot hold two NCCL ranks of one communicator.
(cd "$build" && ctest -R "${TPTRAIN_CHECK_TESTS:-^unit}" --no-tests=error --output-on-failure --timeout 600) 2>&1 | tee "$out/ctest.log"

bench_deck() {  # bench_deck NAME DECK [--set ...]: tptrain bench, then PyTorch on the same shape
  local name=$1 deck=$2
  shift 2
  step "bench $name"
  local phases=()
  [ "${DEVICE_CHECK_PHASES:-0}" = 1 ] && phases=(--phases)
  "${launch[@]}" "$exe" bench "$deck" --steps "$steps" --warmup 1 "${phases[@]}" "$@" 2>&1 | tee "$out/bench-$name.log"
  grep '^{"bench"' "$out/bench-$name.log" | tail -n 1 | sed "s/^{\"bench\": \"[^\"]*\"/{\"bench\": \"$name\"/" >>"$out/bench.jsonl"
  if [ "$torch" = 1 ] && python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    step "torch $name"
    # The deck as tptrain ran it (--set included): the same batch, micro-batch and precision.
    "$exe" check "$deck" "$@" --json >"$out/deck-$name.json"
    python3 "$root/jobs/bench_torch.py" --resolved "$out/deck-$name.json" --name "$name" --device cuda \
      --steps "$steps" --warmup 1 \
      2>&1 | tee "$out/torch-$name.log"
    grep '^{"torch"' "$out/torch-$name.log" | tail -n 1 >>"$out/torch.jsonl"
  fi
}
: >"$out/bench.jsonl"
: >"$out/torch.jsonl"
bench_deck gpt2-124m-fp32 "$root/input/bench/gpt2-124m.toml" --set training.global_batch=8 --set training.micro_batch=8
bench_deck gpt3-1.3b-fp32 "$root/input/bench/gpt3-1.3b.toml"
# bf16 when this tptrain accepts it (asked of a small deck whose every other key is valid, so
# that only the precision can be refused; any other refusal is a failure).
if bf16=$("$exe" check "$root/tests/data/cli/bench.toml" --set "data.train=$root/tests/data/cli/corpus.txt" \
           --set training.precision=bf16 2>&1); then
  bench_deck gpt2-124m-bf16 "$root/input/bench/gpt2-124m.toml" --set training.global_batch=8 \
    --set training.micro_batch=8 --set training.precision=bf16
  bench_deck gpt3-1.3b-bf16 "$root/input/bench/gpt3-1.3b.toml" --set training.precision=bf16
elif grep -q 'training.precision' <<<"$bf16"; then
  echo "device-check: bf16 skipped: $(grep 'training.precision' <<<"$bf16" | head -n 1)"
else
  echo "$bf16" >&2
  false
fi

step summary
python3 - "$out/bench.jsonl" "$out/torch.jsonl" "$peak_fp32" "$peak_bf16" "$gpu" <<'EOF'
import json, sys
bench_file, torch_file, peak32, peak16, gpu = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
torch = {}
for line in open(torch_file):
    t = json.loads(line)
    torch[t["torch"]] = t
rows = [json.loads(line) for line in open(bench_file)]
if not rows:
    sys.exit("device-check: no bench results")
print(f"GPU: {gpu}; dense peak {peak32:g} TFLOP/s fp32, {peak16:g} bf16 (datasheet)")
print(f"{'run':<18} {'params':>8} {'tokens/s':>10} {'model TF/s':>10} {'GEMM TF/s':>10} "
      f"{'MFU peak':>9} {'MFU GEMM':>9} {'torch tok/s':>11} {'ratio':>6}")
for r in rows:
    name = r["bench"]
    peak = peak16 if "bf16" in name else peak32
    tf = r["model_flops_per_s_per_rank"] / 1e12
    t = torch.get(name)
    tt = f"{t['tokens_per_s']:11.0f}" if t else f"{'-':>11}"
    ratio = f"{r['tokens_per_s'] / t['tokens_per_s']:6.2f}" if t else f"{'-':>6}"
    print(f"{name:<18} {r['parameters'] / 1e6:7.0f}M {r['tokens_per_s']:10.0f} {tf:10.1f} "
          f"{r['gemm_peak_flops_per_rank'] / 1e12:10.1f} {100 * tf / peak:8.1f}% {100 * r['mfu']:8.1f}% {tt} {ratio}")
    # phases_s: only from `tptrain bench --phases` (its own, fenced steps; DEVICE_CHECK_PHASES=1).
    phases = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in (r.get("phases_s") or {}).items() if v > 5e-4)
    print(f"{'':<18} step {r['step_s'] * 1e3:.0f} ms: {phases or 'phases not timed'}")
EOF
echo "device-check: OK in $((SECONDS - start)) s ($out)"
