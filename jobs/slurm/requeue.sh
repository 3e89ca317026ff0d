# shellcheck shell=bash
# Sourced by the jobs/slurm/*.sbatch scripts: the clean stop and requeue of a training job.
#
# Slurm delivers `--signal=B:USR1@<seconds>` to the batch shell only, not to the job step, and
# bash runs a trap only between commands, so srun runs in the background: the shell waits for
# it, forwards SIGUSR1 (and SIGTERM, when the job is cancelled or hits its time limit) to it,
# and srun hands the signal to every task. tptrain train then finishes its current step,
# writes a checkpoint on every rank and exits with status 3 (docs/design.md, "Stopping and
# requeueing"), and the script requeues the job; the requeued job (SLURM_RESTART_COUNT > 0)
# resumes from that checkpoint.

tptrain_requeue_status=3

# run_forwarding_stop_signals COMMAND...: runs COMMAND in the background, forwards SIGUSR1 and
# SIGTERM to it as SIGUSR1, and returns its exit status. SIGTERM is passed on as SIGUSR1 because
# tptrain treats both alike while srun and mpiexec may end the whole step on a SIGTERM.
run_forwarding_stop_signals() {
  local status
  tptrain_child='' tptrain_forwarded=0
  trap 'tptrain_forwarded=1; if [ -n "$tptrain_child" ]; then kill -USR1 "$tptrain_child" 2>/dev/null || true; fi' \
    USR1 TERM
  "$@" &
  tptrain_child=$!
  while :; do
    status=0
    wait "$tptrain_child" || status=$?
    # A trapped signal interrupts `wait` while the command still runs: wait again (bash keeps
    # the status of a background command that has ended, so this wait never loses it).
    [ "$tptrain_forwarded" -eq 1 ] || break
    tptrain_forwarded=0
  done
  trap - USR1 TERM
  return "$status"
}

# run_requeueable COMMAND...: run_forwarding_stop_signals COMMAND; when it exits with the
# requeue status, `scontrol requeue` this job and return 0 (the job goes back to the queue and
# Slurm ends this run of it); any other status is returned as it is.
run_requeueable() {
  local status=0
  run_forwarding_stop_signals "$@" || status=$?
  if [ "$status" -eq "$tptrain_requeue_status" ]; then
    echo "tptrain: stopped on request after writing a checkpoint: requeueing job ${SLURM_JOB_ID:?}"
    if scontrol requeue "$SLURM_JOB_ID"; then
      return 0
    fi
    echo "tptrain: scontrol requeue $SLURM_JOB_ID failed (submitted without --requeue, or cancelled?);" \
      "submit it again with --set checkpoint.resume=true to continue from the checkpoint" >&2
  fi
  return "$status"
}

# tptrain_resume: `--set checkpoint.resume=true` in a requeued or restarted job (Slurm counts
# the restarts), so that it continues from the newest checkpoint; empty in the first run, which
# follows its deck.
tptrain_resume=()
# shellcheck disable=SC2034  # read by the scripts that source this file
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then
  tptrain_resume=(--set checkpoint.resume=true)
fi
