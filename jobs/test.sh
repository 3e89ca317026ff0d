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
# ctest's lines kept, to end with the ten slowest tests: the suite must stay under 10 minutes
# of ctest on 2 cores (their sum), and a new slow test shows at once. As many tests at once as
# there are cores (TPTRAIN_TEST_JOBS to change it): the MPI tests that must not share the cores
# say so (tests/CMakeLists.txt: PROCESSORS, RUN_SERIAL).
mkdir -p Testing
log=Testing/ctest-output.log
rc=0
ctest --output-on-failure -j "${TPTRAIN_TEST_JOBS:-$(nproc)}" "$@" 2>&1 | tee "$log" || rc=$?
echo "The ten slowest tests (s):"
sed -nE 's/^.*Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/p' "$log" | sort -rn | head -n 10 | sed 's/^/  /'
exit "$rc"
