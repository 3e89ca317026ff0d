#!/usr/bin/env bash
# Installs missing dependencies (jobs/setup-deps.sh), configures and builds tptrain in
# build/ (Release). Extra CMake arguments: TPTRAIN_CMAKE_ARGS="-DKokkos_ROOT=... ...".
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TPTRAIN_BUILD_DIR:-$root/build}

"$root/jobs/setup-deps.sh"

if [ ! -f "$build/CMakeCache.txt" ]; then
  mkdir -p "$build"
  # shellcheck disable=SC2086
  # Built where it runs: for this CPU (TPTRAIN_ARCH_NATIVE; TPTRAIN_CMAKE_ARGS can turn it off).
  if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTPTRAIN_ARCH_NATIVE=ON ${TPTRAIN_CMAKE_ARGS:-} \
       >"$build/configure.log" 2>&1; then
    cat "$build/configure.log" >&2
    rm -f "$build/CMakeCache.txt"
    echo "tptrain: CMake configuration failed (log above, also in $build/configure.log)" >&2
    exit 1
  fi
fi
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)"
