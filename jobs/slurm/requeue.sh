# shellcheck shell=bash
# Sourced by the jobs/slurm/*.sbatch scripts: the clean stop and requeue of a training job.
#
# Slurm delivers `--signal=B:USR1@<seconds>` to the batch shell only, not to the job step, and
# bash runs a trap only between commands, so srun runs in the background: the shell waits for
# it, forwards SIGUSR1 (and SIGTERM, when the job is cancelled or hits its time limit) to it,
# and srun hands the signal to every task. tptrain train then finishes its current step,
# writes a checkpoint on every rank, leaves the file <run.dir>/requeue and exits with status 3
# (docs/design.md, "Stopping and requeueing"), and the script requeues the job; the requeued job
# (SLURM_RESTART_COUNT > 0) resumes from that checkpoint. The file decides as well as the status:
# a launcher that was signalled itself (mpiexec on SIGTERM, SIGINT or SIGHUP, or srun ended by
# Slurm) returns its own status even though every rank stopped cleanly with 3.

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

# tptrain_requeue_marker EXE DECK [--set ...]: the path of the file tptrain train leaves when a
# stop signal ended the run with its checkpoint written: <run.dir>/requeue (run.dir as
# `tptrain check --json` resolves it, JSON string escapes undone).
tptrain_requeue_marker() {
  local exe=$1 json dir
  shift
  json=$("$exe" check "$@" --json) || return 1
  dir=$(printf '%s\n' "$json" | sed -n 's/.*"run\.dir": "\(\([^"\\]\|\\.\)*\)".*/\1/p' | sed 's/\\\(.\)/\1/g')
  if [ -z "$dir" ]; then
    echo "tptrain: no run.dir in the output of $exe check $* --json" >&2
    return 1
  fi
  printf '%s/requeue\n' "$dir"
}

# run_requeueable MARKER COMMAND...: removes MARKER (only this run's stop may leave it), then
# run_forwarding_stop_signals COMMAND; when it exits with the requeue status or left MARKER,
# `scontrol requeue` this job and return 0 (the job goes back to the queue and Slurm ends this
# run of it); any other status is returned as it is.
run_requeueable() {
  local marker=$1 status=0
  shift
  rm -f "$marker"
  run_forwarding_stop_signals "$@" || status=$?
  if [ "$status" -eq "$tptrain_requeue_status" ] || [ -e "$marker" ]; then
    if [ "$status" -ne "$tptrain_requeue_status" ]; then
      echo "tptrain: the launcher exited with status $status, but the run stopped on request with its checkpoint written: $marker says" \
        "\"$(head -c 1000 "$marker")\""
    fi
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
