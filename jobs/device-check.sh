#!/bin/bash
# The prepared GPU check, for a machine with one NVIDIA GPU (e.g. an H200 with 16 cores) and no
# internet. Two ways to give it tptrain (README, "The device check on a bare GPU machine"):
#   --bundle DIR  a folder made elsewhere by jobs/pack-device-bundle.sh from a CUDA build (tptrain,
#                 its test binaries and every library they need but glibc's and CUDA's): nothing
#                 is built, and the machine needs only the GPU driver, the CUDA libraries (toolkit
#                 or PyTorch's nvidia-* wheels) and Python; estimated 5-7 minutes on an H200
#                 (tests 1-3, benchmarks 3-4; not yet measured)
#   (default)     build here: needs the CUDA toolkit, CMake, a C++17 compiler, MPI, parallel HDF5
#                 and tptrain's header libraries on the machine (README, "Building on a cluster")
#
#   0. prerequisites  each tool found or missing (with what provides it), NCCL and PyTorch found
#              or not; with --bundle, its MANIFEST, glibc, and every library of its programs
#              resolved (ldd); a missing requirement stops here, before anything runs
#   1. gpu     what the machine has (nvidia-smi, nvcc)
#   2. build   (not with --bundle) tptrain for CUDA (jobs/check-cuda-build.sh with
#              TPTRAIN_WARNINGS=report: warnings are listed, not fatal, since this run measures;
#              without NCCL it builds with TPTRAIN_ENABLE_NCCL=OFF and says so), unless --build
#              gives an existing CUDA build of it; Kokkos comes from --kokkos PREFIX (an install
#              with CUDA; Kokkos Kernels there too, or at --kernels PREFIX), or is built first from
#              sources placed beside the repository (../kokkos and ../kokkos-kernels, or
#              --kokkos-src/--kernels-src; CUDA 13 needs Kokkos >= 4.7.01)
#   3. tests   on the CUDA backend: `unit` (the whole single-rank suite on Kokkos::Cuda,
#              collectives on NCCL) and `unit_serial` (kernels and layers on Kokkos::Serial);
#              ctest in a build, the bundle's tests.tsv with --bundle
#   4. bench   `tptrain bench` for GPT-2 124M and the GPT-3 1.3B shape (L24 H2048 A16 S2048) at
#              tensor 1, fp32 and bf16, and the same steps in PyTorch when it is importable with
#              CUDA: the deck as tptrain ran it (`tptrain check --json`), so the same batch,
#              micro-batches, padded vocabulary and precision (bf16 under autocast), eager with
#              SDPA attention
#   5. summary tokens/s; MFU against the GPU's dense peak (--peak-fp32 / --peak-bf16 TFLOP/s;
#              H200/H100 SXM: 67 / 989) and against the cuBLAS GEMM rate measured in the same run;
#              also written to OUT/summary.txt
#
#   jobs/device-check.sh [--bundle DIR | --build DIR | --kokkos PREFIX [--kernels PREFIX]]
#                        [--kokkos-src DIR] [--kernels-src DIR] [--out DIR] [--steps N]
#                        [--peak-fp32 TF] [--peak-bf16 TF] [--no-torch] [--dry-run]
#
# --dry-run: the prerequisites step alone (a missing GPU is reported, not fatal), then the
# commands the other steps would run; nothing is built, tested or timed.
# Every step prints its name first; the first one that fails ends the script with
# "device-check: FAILED at step <name>" and exit status 1, so a half-run check cannot pass as a
# whole one. Logs and JSON lines go to --out (default runs/device-check/).
# Environment: TPTRAIN_LAUNCH (default empty: one rank started without a launcher, as MPI's
# singleton; e.g. "srun -n 1" or "mpiexec -n 1"), CUDA_HOME (default /usr/local/cuda),
# TPTRAIN_CHECK_TESTS (the test names of step 3, an extended regex, default ^unit),
# TPTRAIN_TEST_TIMEOUT (seconds per test with --bundle; default each test's ctest TIMEOUT),
# DEVICE_CHECK_PHASES (1 = `tptrain bench --phases`: as many steps again timed phase by phase,
# fenced at every phase boundary; tokens/s and MFU come from the unfenced steps either way).
# shellcheck disable=SC2015  # `[ A ] && [ B ] || C`: C runs when either test fails, as meant
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

bundle="" build="" kokkos="" kernels="" kokkos_src="$root/../kokkos" kernels_src="$root/../kokkos-kernels"
out="$root/runs/device-check" steps=3 peak_fp32=67 peak_bf16=989 torch=1 dry_run=0
need() {  # need OPTION ARGS...: a usage error naming the option unless a value follows it
  [ $# -ge 2 ] && [ -n "$2" ] || { echo "device-check: $1 needs a value (--help lists the options)" >&2; exit 2; }
}
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) need "$@"; bundle=$2; shift 2 ;;
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
    --dry-run) dry_run=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "device-check: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
if [ -n "$bundle" ] && [ -n "$build$kokkos$kernels" ]; then
  echo "device-check: --bundle brings its own build: it does not combine with --build, --kokkos or --kernels" >&2
  exit 2
fi
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
logged() {  # logged LOG COMMAND...: COMMAND's output appended to LOG; on failure its tail is shown
  local log=$1
  shift
  "$@" >>"$log" 2>&1 || { local rc=$?; tail -n 30 "$log" >&2; echo "device-check: '$1' failed (exit $rc; all of it in $log)" >&2; return $rc; }
}
start=$SECONDS

step prerequisites
# Nothing is installed from here: such a machine has no package registry. With --bundle: the GPU
# driver, the CUDA libraries the bundle names (toolkit or PyTorch's wheels), glibc as new as its
# MANIFEST says, Python 3 (the summary). Building here: also the CUDA toolkit, CMake (with make
# or ninja), a C++17 host compiler, MPI and parallel HDF5, and tptrain's header libraries (toml++,
# CLI11, fmt, nlohmann-json, PCRE2, Catch2), found by CMake at configure (README, "Building on a
# cluster", names each module or Spack package); Kokkos and Kokkos Kernels as --kokkos PREFIX or
# sources (above). Optional: NCCL (without it the collectives fall back to MPI, loudly), a host
# BLAS (Kokkos Kernels' host GEMMs; without it tptrain's own loop), PyTorch (the comparison).
in_env() { "$@"; }  # runs tptrain in its environment: the bundle's, or as it is
missing=0
need_tool() {  # need_tool NAME WHAT: found or missing, with what provides it
  if command -v "$1" >/dev/null 2>&1; then printf '  %-12s %s\n' "$1" "$(command -v "$1")"
  else printf '  %-12s MISSING: %s\n' "$1" "$2"; missing=1; fi
}
need_tool nvidia-smi "the NVIDIA driver"
need_tool python3 "Python 3 (the summary; PyTorch for the comparison)"
if [ -z "$bundle$build" ]; then  # building here; a prebuilt --build or --bundle needs no compiler
  need_tool nvcc "the CUDA toolkit (CUDA_HOME, default /usr/local/cuda)"
  need_tool cmake "CMake >= 3.16 (pip install cmake)"
  if command -v ninja >/dev/null 2>&1; then
    need_tool ninja "Ninja"
  else
    need_tool make "make or ninja (pip install ninja)"
  fi
  need_tool "${CXX:-g++}" "a C++17 host compiler (CXX)"
  need_tool mpicc "MPI (module load openmpi; spack install openmpi)"
  hdf5_parallel=""
  for h in "${HDF5_ROOT:-}/include" /usr/include/hdf5/openmpi /usr/include/hdf5/mpich /usr/include /usr/local/include; do
    [ -f "$h/H5pubconf.h" ] && grep -q '^#define H5_HAVE_PARALLEL 1' "$h/H5pubconf.h" && { hdf5_parallel=$h; break; }
  done
  if [ -n "$hdf5_parallel" ] || command -v h5pcc >/dev/null 2>&1; then
    printf '  %-12s %s\n' hdf5 "parallel: ${hdf5_parallel:-$(command -v h5pcc)}"
  else
    printf '  %-12s MISSING: %s\n' hdf5 "a parallel HDF5 (HDF5_ROOT; module load hdf5/parallel; spack install hdf5+mpi)"
    missing=1
  fi
fi
# NCCL: the header and the library in one place, which the configure step is then pointed at.
nccl_root=""
for d in "${NCCL_ROOT:-}" "${CUDA_HOME:-/usr/local/cuda}" /usr /usr/local; do
  [ -n "$d" ] && [ -f "$d/include/nccl.h" ] || continue
  for l in lib lib64 lib/x86_64-linux-gnu; do
    [ -e "$d/$l/libnccl.so" ] && { nccl_root=$d; break 2; }
  done
done
if [ -n "$bundle" ]; then
  :  # reported with the bundle below
elif [ -n "$nccl_root" ]; then
  echo "  nccl         $nccl_root (include/nccl.h, libnccl.so)"
else
  echo "  nccl         NOT FOUND (nccl.h and libnccl.so under NCCL_ROOT, CUDA_HOME, /usr or /usr/local): device collectives fall back to MPI"
fi
torch_ok=0
if python3 -c "import torch" >/dev/null 2>&1; then
  echo "  torch        $(python3 -c 'import sys, torch; print(torch.__version__, "on Python", sys.version.split()[0])')"
  torch_ok=1
else
  echo "  torch        not importable: no PyTorch comparison"
fi

if [ -n "$bundle" ]; then
  bundle=$(cd "$bundle" && pwd)
  [ -f "$bundle/MANIFEST" ] && [ -f "$bundle/env.sh" ] ||
    { echo "device-check: $bundle is not a bundle of jobs/pack-device-bundle.sh (no MANIFEST or env.sh)" >&2; exit 1; }
  manifest() { sed -n "s/^$1=//p" "$bundle/MANIFEST"; }
  if [ "$(manifest compressed)" = xz ]; then  # unpacked once into the output folder
    if [ ! -f "$out/bundle/MANIFEST" ] || ! cmp -s "$bundle/MANIFEST" "$out/bundle/MANIFEST"; then
      rm -rf "$out/bundle"
      cp -r "$bundle" "$out/bundle"
      find "$out/bundle" -name '*.xz' -print0 | xargs -0 -r python3 -c '
import lzma, os, shutil, sys
for packed in sys.argv[1:]:
    with lzma.open(packed) as src, open(packed[:-3], "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copymode(packed, packed[:-3])
    os.remove(packed)'
    fi
    echo "  bundle       unpacked (xz) into $out/bundle"
    bundle="$out/bundle"
  fi
  [ -x "$bundle/bin/tptrain-bin" ] || { echo "device-check: $bundle has no bin/tptrain-bin" >&2; exit 1; }
  echo "  bundle       $bundle: tptrain $(manifest commit), built $(manifest created) in $(manifest build_dir), NCCL $(manifest nccl)"
  # Its environment (LD_LIBRARY_PATH with its libstdc++, zlib, OpenSSL, ...; OPAL_PREFIX) is given
  # to its programs alone: Python and PyTorch keep the machine's libraries.
  # shellcheck source=/dev/null  # written by jobs/pack-device-bundle.sh
  in_env() { (. "$bundle/env.sh" && exec "$@"); }
  glibc_have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  glibc_need=$(manifest glibc_min)
  if [ -n "$glibc_need" ] && [ "$(printf '%s\n%s\n' "$glibc_need" "${glibc_have:-0}" | sort -V | head -n 1)" != "$glibc_need" ]; then
    printf '  %-12s MISSING: glibc %s here, the bundle needs >= %s (pack it on an older system)\n' glibc "${glibc_have:-unknown}" "$glibc_need"
    missing=1
  else
    printf '  %-12s %s (the bundle needs >= %s)\n' glibc "${glibc_have:-unknown}" "${glibc_need:-?}"
  fi
  for f in "$bundle"/bin/*; do
    [ "$(head -c 4 "$f" | tail -c 3)" = ELF ] || continue
    unresolved=$(in_env ldd "$f" 2>&1 | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ') || true  # static: not dynamic
    if [ -n "$unresolved" ]; then
      printf '  %-12s MISSING libraries: %s(CUDA ones: CUDA_HOME/lib64 or PyTorch'"'"'s nvidia-* wheels; libcuda: the driver)\n' "$(basename "$f")" "$unresolved"
      missing=1
    fi
  done
  for soname in $(manifest cuda_libraries); do
    printf '  %-12s %s\n' "${soname%%.so*}" "$(in_env ldd "$bundle/bin/tptrain-bin" | awk -v s="$soname" '$1 == s {print $3, $4}')"
  done
  # The test binaries read the source tree's data at the path they were built with; point that
  # path at this checkout when nothing is there (the machine is bare; root may create it).
  source_dir=$(manifest source_dir)
  if [ -n "$source_dir" ] && [ ! -e "$source_dir" ]; then
    if [ "$dry_run" = 0 ] && mkdir -p "$(dirname "$source_dir")" 2>/dev/null && ln -s "$root" "$source_dir" 2>/dev/null; then
      echo "  sources      $source_dir -> $root (the tests' built-in data path)"
    else
      echo "  sources      $source_dir (the tests' built-in data path) is absent and cannot be made: tests that read tests/data fail"
    fi
  elif [ -n "$source_dir" ] && [ "$(cd "$source_dir" && pwd -P)" != "$(cd "$root" && pwd -P)" ]; then
    echo "  sources      WARNING: the tests read $source_dir, not this checkout ($root)"
  fi
fi
if [ "$missing" != 0 ]; then
  if [ "$dry_run" = 1 ]; then
    echo "device-check: (dry run) requirements are missing (above); a real run stops here"
  else
    echo "device-check: requirements are missing (above)" >&2
    exit 1
  fi
fi

if [ "$dry_run" = 1 ]; then
  step "dry run: the plan"
  if [ -n "$bundle" ]; then
    echo "build: none (--bundle $bundle)"
    echo "tests (tests.tsv, names matching ${TPTRAIN_CHECK_TESTS:-^unit}):"
    awk -F '\t' -v re="${TPTRAIN_CHECK_TESTS:-^unit}" '$1 ~ re { printf "  %s: %s %s (timeout %s s; %s)\n", $1, $4, $5, $2, $3 }' "$bundle/tests.tsv"
    exe="$bundle/bin/tptrain"
  else
    echo "build: ${build:-jobs/check-cuda-build.sh with Kokkos ${kokkos:-built from $kokkos_src and $kernels_src}}"
    echo "tests: ctest -R '${TPTRAIN_CHECK_TESTS:-^unit}' --no-tests=error"
    exe="${build:-$out/build-cuda}/tptrain"
  fi
  echo "bench: ${launch[*]:+${launch[*]} }$exe bench DECK --steps $steps --warmup 1 for gpt2-124m (batch 8) and gpt3-1.3b, fp32 and bf16"
  [ "$torch" = 1 ] && [ "$torch_ok" = 1 ] && echo "torch: jobs/bench_torch.py --resolved (tptrain check DECK --json) --device cuda for each"
  exit 0
fi

step gpu
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader ||
  { echo "device-check: nvidia-smi found no GPU" >&2; exit 1; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
if [ -n "$bundle" ] && [ -n "$(manifest cuda_arch)" ]; then
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d .)
  [ "$cc" = "$(manifest cuda_arch)" ] ||
    { echo "device-check: the bundle is built for sm_$(manifest cuda_arch) (Kokkos_ARCH_*), this GPU is sm_$cc: pack one built for it" >&2; exit 1; }
fi
nvcc --version 2>/dev/null | tail -n 2 || echo "(nvcc not on PATH: only a prebuilt --build or --bundle can run)"

# Ninja when there is one (and the tree is new: a generator cannot change in a configured tree).
generator() {  # generator BUILD_DIR: CMake's -G arguments for that tree
  if [ ! -f "$1/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then echo "-G Ninja"; fi
}
if [ -n "$bundle" ]; then
  exe="$bundle/bin/tptrain"
else
  if [ -z "$build" ]; then
    if [ -z "$kokkos" ]; then
      step build-kokkos
      # Kokkos and Kokkos Kernels (CUDA 13 needs Kokkos >= 4.7.01) from the source trees beside
      # the repository: CUDA + Serial, the architecture of this GPU (also as -arch for
      # nvcc_wrapper, whose default sm_70 CUDA 13 rejects), cuBLAS as Kokkos Kernels' GEMM.
      [ -f "$kokkos_src/CMakeLists.txt" ] && [ -f "$kernels_src/CMakeLists.txt" ] ||
        { echo "device-check: no Kokkos sources at $kokkos_src and $kernels_src (or give --kokkos PREFIX, --build DIR or --bundle DIR)" >&2; exit 1; }
      cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d .)
      case "$cc" in
        90) arch=Kokkos_ARCH_HOPPER90 ;; 80) arch=Kokkos_ARCH_AMPERE80 ;; 89) arch=Kokkos_ARCH_ADA89 ;;
        100) arch=Kokkos_ARCH_BLACKWELL100 ;; *) echo "device-check: compute capability $cc: add its Kokkos_ARCH" >&2; exit 1 ;;
      esac
      # A host BLAS is optional: without one tptrain's host GEMMs use their own loop.
      host_blas=OFF
      ldconfig -p 2>/dev/null | grep -Eq 'lib(open)?blas\.so ' && host_blas=ON
      echo "Kokkos from $kokkos_src, Kokkos Kernels from $kernels_src: $arch, host BLAS $host_blas (logs: $out/kokkos.log, $out/kernels.log)"
      kokkos="$out/kokkos-install"
      # shellcheck disable=SC2046  # generator: none or two words
      logged "$out/kokkos.log" cmake -S "$kokkos_src" -B "$out/kokkos-build" $(generator "$out/kokkos-build") \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=17 \
        -DCMAKE_CXX_COMPILER="$kokkos_src/bin/nvcc_wrapper" -DCMAKE_CXX_FLAGS="-arch=sm_$cc" -DCMAKE_INSTALL_PREFIX="$kokkos" \
        -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON -DKokkos_ENABLE_SERIAL=ON -D$arch=ON -DBUILD_SHARED_LIBS=ON
      logged "$out/kokkos.log" cmake --build "$out/kokkos-build" -j "$jobs"
      logged "$out/kokkos.log" cmake --install "$out/kokkos-build"
      # shellcheck disable=SC2046
      logged "$out/kernels.log" cmake -S "$kernels_src" -B "$out/kernels-build" $(generator "$out/kernels-build") \
        -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CXX_COMPILER="$kokkos_src/bin/nvcc_wrapper" -DCMAKE_CXX_FLAGS="-arch=sm_$cc" \
        -DCMAKE_INSTALL_PREFIX="$kokkos" -DKokkos_ROOT="$kokkos" \
        -DKokkosKernels_ENABLE_TPL_CUBLAS=ON -DKokkosKernels_ENABLE_TPL_BLAS=$host_blas \
        -DKokkosKernels_ENABLE_TPL_CUSPARSE=OFF -DKokkosKernels_ENABLE_TPL_CUSOLVER=OFF \
        -DKokkosKernels_ENABLE_ALL_COMPONENTS=OFF -DKokkosKernels_ENABLE_COMPONENT_BLAS=ON \
        -DKokkosKernels_ADD_DEFAULT_ETI=OFF -DBUILD_SHARED_LIBS=ON
      logged "$out/kernels.log" cmake --build "$out/kernels-build" -j "$jobs"
      logged "$out/kernels.log" cmake --install "$out/kernels-build"
    fi
    step build-tptrain
    build="$out/build-cuda"
    cmake_args="$(generator "$build") ${TPTRAIN_CMAKE_ARGS:-}"
    if [ -z "$nccl_root" ]; then
      echo "device-check: WARNING: no NCCL: building with TPTRAIN_ENABLE_NCCL=OFF; every collective goes through MPI (host-staged), so the figures below are not NCCL's" >&2
      cmake_args="$cmake_args -DTPTRAIN_ENABLE_NCCL=OFF"
    else
      cmake_args="$cmake_args -DNCCL_ROOT=$nccl_root"
    fi
    # Warnings are reported, not fatal: this run measures; jobs/check-cuda-build.sh alone is the gate.
    TPTRAIN_WARNINGS=report TPTRAIN_CMAKE_ARGS="$cmake_args" TPTRAIN_BUILD_JOBS=$jobs \
      "$root/jobs/check-cuda-build.sh" "$kokkos" "${kernels:-$kokkos}" "$build"
  fi
  build=$(cd "$build" && pwd)
  exe="$build/tptrain"
fi
[ -x "$exe" ] || { echo "device-check: no tptrain executable at $exe" >&2; exit 1; }
in_env "$exe" --version

step tests
# Single-process entries only: one GPU cannot hold two NCCL ranks of one communicator.
tests_re=${TPTRAIN_CHECK_TESTS:-^unit}
if [ -n "$bundle" ]; then
  # ctest's list as the bundle carries it: name, timeout, environment, program, arguments.
  mkdir -p "$out/tests"
  : >"$out/ctest.log"
  ran=0 failed=""
  while IFS=$'\t' read -r name timeout_s envs program args; do
    [[ "$name" =~ $tests_re ]] || continue
    timeout_s=${TPTRAIN_TEST_TIMEOUT:-$timeout_s}
    ran=$((ran + 1))
    echo "--- $name: $program $args" | tee -a "$out/ctest.log"
    env_list=()
    [ "$envs" = - ] || IFS=';' read -r -a env_list <<<"$envs"
    # shellcheck disable=SC2086  # the arguments as ctest split them (none hold blanks)
    if (cd "$out/tests" && in_env env ${env_list[@]+"${env_list[@]}"} timeout "$timeout_s" "$bundle/$program" $args) \
         >"$out/test-$name.log" 2>&1; then
      result="passed"
    else
      result="FAILED (exit $?)"
      failed="$failed $name"
      tail -n 40 "$out/test-$name.log" >&2
    fi
    cat "$out/test-$name.log" >>"$out/ctest.log"
    echo "    $result ($out/test-$name.log)" | tee -a "$out/ctest.log"
  done <"$bundle/tests.tsv"
  [ "$ran" -gt 0 ] || { echo "device-check: no test of the bundle matches '$tests_re'" >&2; exit 1; }
  [ -z "$failed" ] || { echo "device-check: tests failed:$failed" >&2; exit 1; }
else
  (cd "$build" && ctest -R "$tests_re" --no-tests=error --output-on-failure --timeout 600) 2>&1 | tee "$out/ctest.log"
fi

bench_deck() {  # bench_deck NAME DECK [--set ...]: tptrain bench, then PyTorch on the same shape
  local name=$1 deck=$2
  shift 2
  step "bench $name"
  local phases=()
  [ "${DEVICE_CHECK_PHASES:-0}" = 1 ] && phases=(--phases)
  in_env ${launch[@]+"${launch[@]}"} "$exe" bench "$deck" --steps "$steps" --warmup 1 ${phases[@]+"${phases[@]}"} "$@" 2>&1 |
    tee "$out/bench-$name.log"
  grep '^{"bench"' "$out/bench-$name.log" | tail -n 1 | sed "s/^{\"bench\": \"[^\"]*\"/{\"bench\": \"$name\"/" >>"$out/bench.jsonl"
  if [ "$torch" = 1 ] && python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    step "torch $name"
    # The deck as tptrain ran it (--set included): the same batch, micro-batch, padded
    # vocabulary and precision.
    in_env "$exe" check "$deck" "$@" --json >"$out/deck-$name.json"
    PYTHONUNBUFFERED=1 python3 "$root/jobs/bench_torch.py" --resolved "$out/deck-$name.json" --name "$name" \
      --device cuda --steps "$steps" --warmup 1 2>&1 | tee "$out/torch-$name.log"
    grep '^{"torch"' "$out/torch-$name.log" | tail -n 1 >>"$out/torch.jsonl"
  fi
}
: >"$out/bench.jsonl"
: >"$out/torch.jsonl"
bench_deck gpt2-124m-fp32 "$root/input/bench/gpt2-124m.toml" --set training.global_batch=8 --set training.micro_batch=8
bench_deck gpt3-1.3b-fp32 "$root/input/bench/gpt3-1.3b.toml"
# bf16 when this tptrain accepts it (asked of a small deck whose every other key is valid, so
# that only the precision can be refused; any other refusal is a failure).
if bf16=$(in_env "$exe" check "$root/tests/data/cli/bench.toml" --set "data.train=$root/tests/data/cli/corpus.txt" \
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
python3 - "$out/bench.jsonl" "$out/torch.jsonl" "$peak_fp32" "$peak_bf16" "$gpu" <<'EOF' | tee "$out/summary.txt"
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
    tf = (r["model_flops_per_s_per_rank"] or 0) / 1e12
    t = torch.get(name)
    tt = f"{t['tokens_per_s']:11.0f}" if t else f"{'-':>11}"
    ratio = f"{(r['tokens_per_s'] or 0) / t['tokens_per_s']:6.2f}" if t else f"{'-':>6}"
    print(f"{name:<18} {r['parameters'] / 1e6:7.0f}M {r['tokens_per_s'] or 0:10.0f} {tf:10.1f} "
          f"{(r['gemm_peak_flops_per_rank'] or 0) / 1e12:10.1f} {100 * tf / peak:8.1f}% {100 * (r['mfu'] or 0):8.1f}% {tt} {ratio}")
    # phases_s: only from `tptrain bench --phases` (its own, fenced steps; DEVICE_CHECK_PHASES=1).
    phases = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in (r.get("phases_s") or {}).items() if v > 5e-4)
    print(f"{'':<18} step {r['step_s'] * 1e3:.0f} ms: {phases or 'phases not timed'}")
EOF
echo "device-check: OK in $((SECONDS - start)) s ($out)"
