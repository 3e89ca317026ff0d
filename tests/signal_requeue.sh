#!/usr/bin/env bash
# The clean stop on a signal (docs/design.md, "Stopping and requeueing"), on 2 ranks:
#   usr1       SIGUSR1 to mpiexec (which passes it to both ranks) mid-run: both ranks exit with
#              status 3, the checkpoint of the step they stopped at is complete (tptrain inspect),
#              and the run resumed from it logs the same losses, bit for bit, as a run never
#              interrupted
#   term_rank0 SIGTERM to rank 0's process only: both ranks still agree on one step, write its
#              checkpoint and exit with status 3
#   slurm_cpu  jobs/slurm/train-cpu.sbatch under a fake srun and scontrol (tests/jobs/fake_slurm):
#              SIGUSR1 to the batch shell, as `--signal=B:USR1@...` sends it, is passed to the
#              ranks, the job asks for its requeue; run again as the requeued job it resumes
#   launcher_term
#              the same script whose srun is a real mpiexec, and SIGTERM to that mpiexec and to
#              the ranks, as Slurm sends it at a time limit: the ranks stop with their
#              checkpoint, mpiexec itself exits 1, and the job is requeued all the same, on the
#              <run.dir>/requeue marker that rank 0 left
#   launcher_only
#              SIGTERM to that mpiexec alone, with more output than its ptys hold while mpiexec
#              does not read them: the ranks still stop with their checkpoint and the marker
#   startup    the signal raised at the first instruction of each rank (the test hook
#              TPTRAIN_TEST_STOP_SIGNAL_AT_START, before any library is initialised): the run
#              stops after step 1 with its checkpoint and status 3; `tptrain check` dies of it
#              as before; the next run removes the marker
# Every stop leaves <run.dir>/requeue naming the signal and the step.
# The run to be stopped has 10^6 steps, so no timing decides whether the signal comes before
# its end; the runs compared with it (resumed, uninterrupted) stop a few steps after the step it
# stopped at. Their decks differ only in training.steps, and a constant learning rate after the
# warmup makes the steps independent of it (the data order depends on the seed and step only).
# Usage: signal_requeue.sh CASE WORKDIR DECK EXE MPIEXEC-COMMAND...
set -uo pipefail
case_name=$1 work=$2 deck=$3 exe=$4
shift 4
mpi2=("$@")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

train=(train "$deck" --set training.log_interval=1 --set optimizer.decay=constant
       --set training.eval_interval=0 --set checkpoint.interval=0)
# SIGNAL_SETS: more --set options for every run (cli_signal_usr1_async: checkpoint.async = true,
# whose stop must wait for the background write before the requeue exit).
read -r -a extra_sets <<<"${SIGNAL_SETS:-}"
train+=("${extra_sets[@]}")
run=(--set run.dir="$work/run" --set checkpoint.dir="$work/run/ck")
long=(--set training.steps=1000000)

# start_stoppable LOG COMMAND...: COMMAND in the background (pid in $job); returns once rank 0
# has logged step 3 to <run.dir>/metrics.jsonl (the stop then comes mid-run, after start-up).
start_stoppable() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  job=$!
  for _ in $(seq 1200); do
    grep -q '"step": 3,' "$work/run/metrics.jsonl" 2>/dev/null && return 0
    kill -0 "$job" 2>/dev/null || { cat "$log"; fail "the run ended before step 3"; }
    sleep 0.1
  done
  kill -KILL "$job"
  cat "$log"
  fail "no step 3 after 120 s"
}

# finish LOG: waits for $job (at most 120 s after the signal) and prints its output.
finish() {
  local log=$1 waited=0
  while kill -0 "$job" 2>/dev/null && [ $waited -lt 1200 ]; do sleep 0.1; waited=$((waited + 1)); done
  kill -0 "$job" 2>/dev/null && { kill -KILL "$job"; cat "$log"; fail "the run did not stop within 120 s"; }
  wait "$job"
  status=$?
  cat "$log"
}

# stopped_step LOG SIGNAL: the step of rank 0's stop message; checks its checkpoint is the
# complete newest one, verifies (tptrain inspect), and that no step after it was logged.
stopped_step() {
  local log=$1 signal=$2 step file
  step=$(sed -n "s/^received $signal: checkpoint of step \([0-9]*\) written; exiting with status 3 so the job is requeued$/\1/p" "$log")
  [ -n "$step" ] || fail "no 'received $signal: checkpoint of step N written ...' line"
  [ "$(grep -c "^received $signal" "$log")" -eq 1 ] || fail "the stop was reported more than once"
  file=$(printf '%s/run/ck/step_%08d.h5' "$work" "$step")
  [ -f "$file" ] || fail "no checkpoint $file of the step the run stopped at"
  [ "$(find "$work/run/ck" -name '*.tmp*' | wc -l)" -eq 0 ] || fail "a temporary checkpoint file was left behind"
  [ "$(find "$work/run/ck" -name 'step_*.h5' | wc -l)" -eq 1 ] || fail "expected exactly one checkpoint (checkpoint.interval = 0)"
  "$exe" inspect "$file" >"$work/inspect.log" 2>&1 || { cat "$work/inspect.log"; fail "tptrain inspect rejects $file"; }
  grep -q '"step": '"$((step + 1))"',' "$work/run/metrics.jsonl" && fail "step $((step + 1)) was logged after the stop"
  grep -q '"step": '"$step"',' "$work/run/metrics.jsonl" || fail "step $step is not in metrics.jsonl"
  grep -q "^$signal: checkpoint of step $step written" "$work/run/requeue" ||
    fail "no requeue marker $work/run/requeue naming $signal and step $step: $(cat "$work/run/requeue" 2>&1)"
  echo "$step"
}

# ranks_exited CODE: both ranks started through $ranks exited with CODE.
ranks_exited() {
  [ "$(cat "$work/codes/0" "$work/codes/1" 2>/dev/null | tr '\n' ' ')" = "$1 $1 " ] ||
    fail "expected both ranks to exit with status $1, got: $(cat "$work/codes/"* 2>/dev/null | tr '\n' ' ')"
}
# tasks_exited LOG CODE: the fake srun's report of both tasks.
tasks_exited() {
  [ "$(grep -c "^srun: task [01]: exit code $2\$" "$1")" -eq 2 ] || fail "expected both tasks to exit with status $2"
}

# The records of metrics.jsonl without tokens_per_s (a time): step, loss, lr, grad_norm as written.
records() { sed -n 's/^\({"step": [0-9]*, "loss": [^,]*, "lr": [^,]*, "grad_norm": [^,]*\),.*/\1/p' "$1"; }

# start_job_under_mpiexec: the CPU job script in the background (pid in $job), its srun a real
# mpiexec (pid in $launcher) whose SIGKILL comes 2 x 5 s after it is signalled.
start_job_under_mpiexec() {
  export PATH="$root/tests/jobs/fake_slurm:$PATH" SLURM_NTASKS=2 TPTRAIN_FAKE_SRUN_MPIEXEC="${mpi2[*]}" SLURM_JOB_ID=4243 SLURM_SUBMIT_DIR="$root" TPTRAIN_EXE="$exe" \
    TPTRAIN_FAKE_SCONTROL_LOG="$work/scontrol.log" TPTRAIN_FAKE_SRUN_PLAIN=1 OMPI_MCA_odls_base_sigkill_timeout=5
  start_stoppable "$work/job.log" bash "$root/jobs/slurm/train-cpu.sbatch" "$deck" "${train[@]:2}" "${run[@]}" "${long[@]}"
  launcher=$(ps -o pid=,comm= --ppid "$job" | awk '$2 == "mpiexec" { print $1 }')
  [ -n "$launcher" ] || { kill -KILL "$job"; fail "no mpiexec under the job script"; }
}
# finish_requeued_on_marker: the job exits 0, requeued on the marker though mpiexec exited 1.
finish_requeued_on_marker() {
  finish "$work/job.log"
  [ "$status" -eq 0 ] || fail "expected the job script to requeue and exit 0, got $status"
  grep -q "^tptrain: the launcher exited with status [0-9]*, but the run stopped on request" "$work/job.log" ||
    fail "expected mpiexec to exit with its own status and the script to requeue on the marker"
}

# The 2 ranks under the fake srun's task wrapper, which writes each rank's exit code to
# $work/codes/<rank> (mpiexec's own status would show one of them).
mkdir -p "$work/codes"
ranks=("${mpi2[@]}" bash "$here/jobs/fake_slurm/task.sh" "$work/codes")

case $case_name in
usr1)
  start_stoppable "$work/stopped.log" "${ranks[@]}" "$exe" "${train[@]}" "${run[@]}" "${long[@]}"
  kill -USR1 "$job"
  finish "$work/stopped.log"
  [ "$status" -eq 0 ] || fail "mpiexec failed ($status)"
  ranks_exited 3
  step=$(stopped_step "$work/stopped.log" SIGUSR1) || exit 1
  end=$((step + 3))

  "${mpi2[@]}" "$exe" "${train[@]}" "${run[@]}" --set training.steps=$end --set checkpoint.resume=true \
    >"$work/resumed.log" 2>&1
  status=$?
  cat "$work/resumed.log"
  [ "$status" -eq 0 ] || fail "the resumed run failed ($status)"
  grep -q "resuming from .*step_$(printf %08d "$step").h5" "$work/resumed.log" || fail "did not resume from step $step"
  [ ! -e "$work/run/requeue" ] || fail "the resumed run left the requeue marker of the stopped one"

  "${mpi2[@]}" "$exe" "${train[@]}" --set run.dir="$work/ref" --set checkpoint.dir="$work/ref/ck" \
    --set training.steps=$end >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "the uninterrupted run failed"; }
  records "$work/ref/metrics.jsonl" >"$work/ref.records"
  records "$work/run/metrics.jsonl" >"$work/run.records"
  [ "$(wc -l <"$work/ref.records")" -eq "$end" ] || fail "expected $end records from the uninterrupted run"
  diff "$work/ref.records" "$work/run.records" || fail "stopped + resumed differs from uninterrupted"
  echo "steps 1..$end: stopped at $step by SIGUSR1, resumed; every loss, lr and grad_norm equal to the uninterrupted run"
  ;;
term_rank0)
  start_stoppable "$work/stopped.log" "${ranks[@]}" "$exe" "${train[@]}" "${run[@]}" "${long[@]}"
  rank0=$(sed -n 's/^host .* pid \([0-9]*\) since .*/\1/p' "$work/run/tptrain.lock")
  [ -n "$rank0" ] || fail "no pid in $work/run/tptrain.lock"
  kill -TERM "$rank0"
  finish "$work/stopped.log"
  [ "$status" -eq 0 ] || fail "mpiexec failed ($status)"
  ranks_exited 3
  stopped_step "$work/stopped.log" SIGTERM >/dev/null || exit 1
  [ ! -e "$work/run/tptrain.lock" ] || fail "the stopped run left its lock file"
  ;;
slurm_cpu)
  export PATH="$root/tests/jobs/fake_slurm:$PATH" SLURM_NTASKS=2 TPTRAIN_FAKE_SRUN_MPIEXEC="${mpi2[*]}" SLURM_JOB_ID=4242 SLURM_SUBMIT_DIR="$root" TPTRAIN_EXE="$exe" \
    TPTRAIN_FAKE_SCONTROL_LOG="$work/scontrol.log"
  start_stoppable "$work/job.log" bash "$root/jobs/slurm/train-cpu.sbatch" "$deck" "${train[@]:2}" "${run[@]}" "${long[@]}"
  kill -USR1 "$job"  # what --signal=B:USR1@<seconds> does: the batch shell only
  finish "$work/job.log"
  [ "$status" -eq 0 ] || fail "expected the job script to requeue and exit 0, got $status"
  tasks_exited "$work/job.log" 3
  step=$(stopped_step "$work/job.log" SIGUSR1) || exit 1
  [ "$(cat "$work/scontrol.log")" = "requeue 4242" ] || fail "expected one 'scontrol requeue 4242'"

  # The requeued job: the same script, SLURM_RESTART_COUNT = 1, resumes (here it ends 2 steps later).
  SLURM_RESTART_COUNT=1 bash "$root/jobs/slurm/train-cpu.sbatch" "$deck" "${train[@]:2}" "${run[@]}" \
    --set training.steps=$((step + 2)) >"$work/requeued.log" 2>&1
  status=$?
  cat "$work/requeued.log"
  [ "$status" -eq 0 ] || fail "the requeued job failed ($status)"
  grep -q "resuming from .*step_$(printf %08d "$step").h5" "$work/requeued.log" || fail "the requeued job did not resume"
  tasks_exited "$work/requeued.log" 0
  [ "$(wc -l <"$work/scontrol.log")" -eq 1 ] || fail "a finished job was requeued"
  [ ! -e "$work/run/requeue" ] || fail "the requeued job left the requeue marker of the stopped one"
  ;;
launcher_term)
  # The fake srun is mpiexec itself. Open MPI's mpiexec (ORTE) that gets SIGTERM sends the ranks
  # SIGCONT, sleeps odls_base_sigkill_timeout seconds, sends SIGTERM, sleeps as long again and
  # sends SIGKILL, all in the loop that reads the ranks' output: while it sleeps, a rank that
  # writes more than its pty holds (about 19 KB, 200 step lines here) blocks in write() and never
  # reaches the stop. Slurm at a time limit signals every process of the job, the ranks too, and
  # they stop after a few lines; 2 x 5 s before the SIGKILL leave room for the checkpoint. The
  # ranks are held stopped while they get SIGTERM, and mpiexec's SIGCONT lets them go: they
  # cannot end before mpiexec has taken its own SIGTERM (and its exit status with it).
  start_job_under_mpiexec
  mapfile -t tasks < <(pgrep -P "$launcher")
  [ "${#tasks[@]}" -eq 2 ] || { kill -KILL "$job" "${tasks[@]}"; fail "expected 2 ranks under mpiexec, found: ${tasks[*]}"; }
  both_stopped() { [ "$(ps -o stat= -p "${tasks[0]}" -p "${tasks[1]}" | grep -c '^[Tt]')" -eq 2 ]; }  # t: traced
  kill -STOP "${tasks[@]}"
  for _ in $(seq 100); do both_stopped && break; sleep 0.1; done
  both_stopped || { kill -KILL "$job" "${tasks[@]}"; fail "the ranks did not stop on SIGSTOP within 10 s"; }
  kill -TERM "${tasks[@]}"
  kill -TERM "$launcher"
  finish_requeued_on_marker
  grep -q "^tptrain: the launcher exited with status 3," "$work/job.log" && fail "mpiexec exited 3: the marker decided nothing"
  stopped_step "$work/job.log" SIGTERM >/dev/null || exit 1
  [ "$(cat "$work/scontrol.log")" = "requeue 4243" ] || fail "expected one 'scontrol requeue 4243'"
  ;;
launcher_only)
  # SIGTERM to mpiexec alone, at a step rate that fills the ranks' ptys while mpiexec sleeps
  # without reading them (launcher_term): the ranks make their output non-blocking once the
  # signal reaches them, so they still checkpoint and leave the marker. Lines they could not
  # write are dropped, so the stop is read from the marker and the checkpoint, not the log.
  start_job_under_mpiexec
  kill -TERM "$launcher"
  finish_requeued_on_marker
  step=$(sed -n 's/^SIGTERM: checkpoint of step \([0-9]*\) written.*/\1/p' "$work/run/requeue" 2>/dev/null)
  [ -n "$step" ] || fail "no requeue marker naming SIGTERM and a step: $(cat "$work/run/requeue" 2>&1)"
  file=$(printf '%s/run/ck/step_%08d.h5' "$work" "$step")
  "$exe" inspect "$file" >"$work/inspect.log" 2>&1 || { cat "$work/inspect.log"; fail "tptrain inspect rejects $file"; }
  [ ! -e "$work/run/tptrain.lock" ] || fail "the ranks did not end cleanly (run lock left behind)"
  [ "$(cat "$work/scontrol.log")" = "requeue 4243" ] || fail "expected one 'scontrol requeue 4243'"
  ;;
startup)
  TPTRAIN_TEST_STOP_SIGNAL_AT_START=SIGTERM "${ranks[@]}" "$exe" "${train[@]}" "${run[@]}" --set training.steps=50 \
    >"$work/stopped.log" 2>&1
  status=$?
  cat "$work/stopped.log"
  [ "$status" -eq 0 ] || fail "mpiexec failed ($status)"
  ranks_exited 3
  step=$(stopped_step "$work/stopped.log" SIGTERM) || exit 1
  [ "$step" -eq 1 ] || fail "a signal from the start stopped the run after step $step, not step 1"
  # The commands with nothing to save end on the signal, as they always did.
  TPTRAIN_TEST_STOP_SIGNAL_AT_START=SIGTERM "$exe" check "$deck" >"$work/check.log" 2>&1
  status=$?
  [ "$status" -eq $((128 + 15)) ] || { cat "$work/check.log"; fail "tptrain check: expected death by SIGTERM (143), got $status"; }
  "${mpi2[@]}" "$exe" "${train[@]}" "${run[@]}" --set training.steps=3 --set checkpoint.resume=true \
    >"$work/resumed.log" 2>&1 || { cat "$work/resumed.log"; fail "the resumed run failed"; }
  [ ! -e "$work/run/requeue" ] || fail "the next run left the requeue marker of the stopped one"
  echo "stopped after step 1 by a SIGTERM raised at the first instruction; check died of it; the next run removed the marker"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
