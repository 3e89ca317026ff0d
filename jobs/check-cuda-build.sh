#!/bin/bash
# Configures and builds tptrain and its tests against a Kokkos built with CUDA, with warnings as
# errors: the check that the GPU build compiles, on a machine with the CUDA toolkit but no GPU.
#
#   jobs/check-cuda-build.sh KOKKOS_PREFIX [KOKKOS_KERNELS_PREFIX] [BUILD_DIR]
#
# KOKKOS_PREFIX is a Kokkos install with Kokkos_ENABLE_CUDA (docs/cluster.md, "Building on a
# cluster": how to get one); KOKKOS_KERNELS_PREFIX defaults to it. BUILD_DIR defaults to build-cuda/.
# NCCL is found through NCCL_ROOT or the CUDA toolkit's include/lib directories.
#
# The project is configured with the HOST compiler (CMAKE_CXX_COMPILER = g++): Kokkos' compile
# launcher sends only the targets that link Kokkos through nvcc_wrapper, so io/ (toml++, which
# nvcc cannot parse) stays on g++. Host warnings fail through -Werror; nvcc's own diagnostics
# ("warning #...") do not obey -Werror on the host compiler's side, so the log is scanned for
# them as well. Exit status: 0 only when configure and build succeed with zero warnings.
#
# TPTRAIN_WARNINGS=report (jobs/device-check.sh, which measures rather than gates): no -Werror,
# and warnings are counted and listed but do not fail; the default, error, is the gate above.
set -euo pipefail
warnings=${TPTRAIN_WARNINGS:-error}
case "$warnings" in
  error) werror="-Werror" ;;
  report) werror="" ;;
  *) echo "check-cuda-build: TPTRAIN_WARNINGS=$warnings: expected error or report" >&2; exit 2 ;;
esac

if [[ $# -lt 1 || $# -gt 3 || "$1" == -h || "$1" == --help ]]; then
  echo "usage: $0 KOKKOS_PREFIX [KOKKOS_KERNELS_PREFIX] [BUILD_DIR]" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
kokkos=$(cd "$1" && pwd)
kernels=$(cd "${2:-$1}" && pwd)
build=${3:-$root/build-cuda}
config="$kokkos/include/KokkosCore_config.h"
[[ -f "$config" ]] || { echo "check-cuda-build: $config not found: is $kokkos a Kokkos install prefix?" >&2; exit 1; }
grep -q '^#define KOKKOS_ENABLE_CUDA$' "$config" ||
  { echo "check-cuda-build: the Kokkos at $kokkos has no CUDA backend (KOKKOS_ENABLE_CUDA is not defined in $config)" >&2; exit 1; }
command -v nvcc >/dev/null || { echo "check-cuda-build: nvcc is not on PATH (module load cuda, or PATH=\$CUDA_HOME/bin:\$PATH)" >&2; exit 1; }

mkdir -p "$build"
log="$build/check-cuda-build.log"
echo "check-cuda-build: Kokkos $kokkos, Kokkos Kernels $kernels, build $build (log: $log)"
set -o pipefail
{
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="${CXX:-g++}" \
    -DKokkos_ROOT="$kokkos" -DKokkosKernels_ROOT="$kernels" \
    -DCMAKE_CXX_FLAGS="$werror" ${TPTRAIN_CMAKE_ARGS:-} &&
  cmake --build "$build" -j "${TPTRAIN_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
} 2>&1 | tee "$log" || { echo "check-cuda-build: FAILED (configure or build; see $log)" >&2; exit 1; }

# nvcc reports its own warnings as "warning #<n>-D" (front end) or "nvcc warning"; the host
# compiler's would already have failed the build through -Werror.
if grep -E -n "warning( #[0-9]+)?[-A-Z]*:|nvcc warning" "$log" >"$build/check-cuda-build.warnings"; then
  if [[ "$warnings" == report ]]; then
    echo "check-cuda-build: WARNING: $(wc -l <"$build/check-cuda-build.warnings") warning line(s) (reported, not fatal; the gate is TPTRAIN_WARNINGS=error):" >&2
  else
    echo "check-cuda-build: FAILED: $(wc -l <"$build/check-cuda-build.warnings") warning line(s):" >&2
  fi
  head -n 40 "$build/check-cuda-build.warnings" >&2
  [[ "$warnings" == report ]] || exit 1
fi
grep -q "CUDA backend: ON" "$log" ||
  { echo "check-cuda-build: FAILED: the configure step did not report the CUDA backend" >&2; exit 1; }
if [[ -s "$build/check-cuda-build.warnings" && "$warnings" == report ]]; then
  echo "check-cuda-build: OK with warnings: tptrain and its tests built against CUDA Kokkos ($build)"
else
  echo "check-cuda-build: OK: tptrain and its tests built against CUDA Kokkos with zero warnings ($build)"
fi
