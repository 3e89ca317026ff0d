#!/usr/bin/env bash
# The test command of the README: installs what is missing, builds, runs the whole suite
# (single-rank tests, then the same binary under mpiexec on 2 and 4 ranks).
# Extra arguments go to ctest (e.g. jobs/test.sh -R mpi_4).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/jobs/build.sh"
# shellcheck source=jobs/env.sh
. "$root/jobs/env.sh"
build=${TPTRAIN_BUILD_DIR:-$root/build}
cd "$build"
ctest --output-on-failure "$@"
