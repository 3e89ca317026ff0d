#!/usr/bin/env bash
# One task of the fake srun: runs COMMAND as this MPI rank, passing SIGUSR1/SIGTERM on to it
# (mpiexec signals this shell), and writes its exit code to CODES_DIR/<rank>. Exits 0 itself:
# Open MPI's mpiexec ends the other ranks as soon as one exits non-zero, which could kill a rank
# still on its way out and hide its exit code.
#   task.sh CODES_DIR COMMAND...
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=jobs/slurm/requeue.sh
. "$here/../../../jobs/slurm/requeue.sh"
codes=$1
shift
run_forwarding_stop_signals "$@"
echo $? >"$codes/${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-0}}}"
exit 0
