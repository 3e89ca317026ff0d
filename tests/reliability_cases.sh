#!/usr/bin/env bash
# Job reliability cases that take more than one command (ctest runs each as its own test):
#   lock       two runs on one run.dir: the second is refused naming the first; after the first
#              is killed, its stale lock is reported and taken over
#   diverge    a diverging run stops without publishing non-finite weights as a checkpoint
#   nan_eval   a checkpoint holding NaN (valid checksums) is refused by eval, generate and export
#              (which leaves no --out folder)
#   stream     generate prints tokens as they come (--tokens 2147483647, stopped after 8 s)
#   extra_layer  a checkpoint with one layer group more than its deck is refused by eval and inspect
#   fp16_overflow  a finite checkpoint whose fp16 forward overflows (ln_f weight * 1e6): resume stops
#              with an error (not every step skipped and exit 0), generate refuses the NaN logits,
#              eval the NaN loss; a run that skips every step says so
#   earlier_run  a run from step 0 on an earlier run's folders is refused (its files untouched), also
#              for a training.init_from among them; --fresh deletes them, saying so; checkpoint.keep
#              rotates only the writing run's checkpoints (by /train/run_id)
#   fp16_saved_scale  a checkpoint with a bad saved loss scale is refused naming the file and the
#              attribute, every rank exiting 1 (no abort, no source location); a saved scale below
#              a raised training.loss_scale_min starts at that minimum, and the overflow message
#              names the scale used
# Usage: reliability_cases.sh CASE WORKDIR DECK CHECKPOINT EXE MPIEXEC-COMMAND...
set -uo pipefail
case_name=$1 work=$2 deck=$3 checkpoint=$4 exe=$5
shift 5
mpi2=("$@")
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
fixtures=$here/hostile/hostile_fixtures.py
# No user-facing failure names a source file and line instead of a reason, or aborts the job.
no_abort() {
  grep -aE "failed at [^ ]*\.(cpp|hpp):[0-9]+|MPI_ABORT was invoked" "$1" && fail "$1: a source location or an abort"
  return 0
}
# expect_fail LOG REGEX COMMAND...: non-zero exit (not a signal) within the test's timeout, and
# REGEX in the output exactly once (one message, from rank 0).
expect_fail() {
  local log=$1 regex=$2
  shift 2
  "$@" >"$log" 2>&1
  local rc=$?
  cat "$log"
  [ "$rc" -ne 0 ] || fail "expected a non-zero exit: $*"
  [ "$rc" -lt 128 ] || fail "killed by a signal ($rc): $*"
  local n
  n=$(grep -cE -- "$regex" "$log")
  [ "$n" -eq 1 ] || fail "'$regex' printed $n times, expected once"
}

case $case_name in
lock)
  run=(--set run.dir="$work/run" --set checkpoint.dir="$work/run/ck" --set checkpoint.resume=false)
  "${mpi2[@]}" "$exe" train "$deck" "${run[@]}" --set training.steps=100000 --set training.log_interval=1000 \
    >"$work/first.log" 2>&1 &
  first=$!
  for _ in $(seq 300); do [ -s "$work/run/tptrain.lock" ] && break; sleep 0.1; done
  [ -s "$work/run/tptrain.lock" ] || { kill $first; cat "$work/first.log"; fail "the first run never took its lock"; }
  expect_fail "$work/second.log" "is in use by tptrain pid [0-9]+ on host" \
    "${mpi2[@]}" "$exe" train "$deck" "${run[@]}" --set training.steps=2
  # The first run dies: SIGKILL to rank 0, the lock's owner (SIGTERM would stop it cleanly and
  # release the lock, docs/design.md "Stopping and requeueing"); mpiexec then ends rank 1.
  owner=$(sed -n 's/^host .* pid \([0-9]*\) since .*/\1/p' "$work/run/tptrain.lock")
  [ -n "$owner" ] || { kill $first; fail "no pid in the lock file"; }
  kill -KILL "$owner"
  wait $first
  [ -s "$work/run/tptrain.lock" ] || fail "expected the killed run's lock file to stay behind (stale)"
  # Run again as a requeued job is (checkpoint.resume = true): the killed run left metrics.jsonl
  # but no checkpoint, so this run starts from step 0 and keeps that file aside, saying so.
  "${mpi2[@]}" "$exe" train "$deck" "${run[@]}" --set checkpoint.resume=true --set training.steps=2 \
    >"$work/third.log" 2>&1 || { cat "$work/third.log"; fail "the run after the killed one did not take over its stale lock"; }
  cat "$work/third.log"
  grep -q "taking over the stale lock" "$work/third.log" || fail "the stale lock was not reported"
  grep -q "no checkpoint to resume from: the metrics.jsonl of that earlier start is kept as [^ ]*/run/metrics.jsonl.[0-9TZ]*" \
    "$work/third.log" || fail "the killed run's metrics.jsonl was not kept aside"
  ls "$work"/run/metrics.jsonl.* >/dev/null || fail "no metrics.jsonl.* kept"
  [ ! -e "$work/run/tptrain.lock" ] || fail "a finished run left its lock file"
  ;;
diverge)
  expect_fail "$work/log" "weights are not finite" \
    "${mpi2[@]}" "$exe" train "$deck" --set run.dir="$work/run" --set checkpoint.dir="$work/run/ck" \
    --set checkpoint.interval=1 --set optimizer.lr=1e38 --set optimizer.warmup_steps=0 --set training.steps=4
  for f in "$work"/run/ck/step_*.h5; do
    [ -e "$f" ] || continue
    "$exe" inspect "$f" | grep -qiE "nan|inf" && fail "$f holds non-finite weights"
  done
  ;;
nan_eval)
  /usr/bin/python3 "$here/poison_checkpoint.py" "$checkpoint" "$work/nan.h5" || fail "could not make the NaN checkpoint"
  expect_fail "$work/eval.log" "holds non-finite values" "${mpi2[@]}" "$exe" eval "$deck" --checkpoint "$work/nan.h5"
  grep -q "eval_loss" "$work/eval.log" && fail "eval printed a loss for a NaN checkpoint"
  expect_fail "$work/gen.log" "holds non-finite values" \
    "${mpi2[@]}" "$exe" generate "$deck" --checkpoint "$work/nan.h5" --prompt x --tokens 4
  "$exe" inspect "$work/nan.h5" >"$work/inspect.log" 2>&1 && { cat "$work/inspect.log"; fail "inspect passed a NaN checkpoint"; }
  grep -q "model/ln_f/weight: holds non-finite values (1 NaN)" "$work/inspect.log" || fail "inspect did not name the NaN"
  # export refuses it too, and leaves no --out folder behind (issue 30: an empty one was left).
  expect_fail "$work/export.log" "ln_f/weight holds nan at element 0: not exported" \
    "$exe" export "$work/nan.h5" --format hf --out "$work/nan_hf"
  no_abort "$work/export.log"
  [ ! -e "$work/nan_hf" ] || fail "a failed export left $work/nan_hf behind"
  ;;
stream)
  timeout -s TERM 8 "${mpi2[@]}" "$exe" generate "$deck" --checkpoint "$checkpoint" --prompt "It is" \
    --tokens 2147483647 >"$work/out.txt" 2>"$work/err.txt"
  head -c 300 "$work/out.txt"
  echo
  offset=$(grep -abo "It is" "$work/out.txt" | head -1 | cut -d: -f1)
  [ -n "$offset" ] || { cat "$work/err.txt"; fail "the prompt was not printed"; }
  generated=$(($(stat -c %s "$work/out.txt") - offset - 5))
  [ "$generated" -gt 200 ] || { cat "$work/err.txt"; fail "only $generated bytes generated in 8 s"; }
  echo "$generated bytes generated before the run was stopped"
  ;;
extra_layer)
  cp "$checkpoint" "$work/extra.h5"
  /usr/bin/python3 -c 'import h5py, sys; f = h5py.File(sys.argv[1], "r+"); f.copy("model/layers/1", "model/layers/2")' \
    "$work/extra.h5" || fail "could not add a layer group"
  expect_fail "$work/eval.log" "model/layers/2/attn/proj/bias: the checkpoint holds this dataset" \
    "${mpi2[@]}" "$exe" eval "$deck" --checkpoint "$work/extra.h5"
  "$exe" inspect "$work/extra.h5" >"$work/inspect.log" 2>&1 && { cat "$work/inspect.log"; fail "inspect passed"; }
  grep -q "model/layers/2/ln_1/weight: not part of the model the checkpoint's deck describes" "$work/inspect.log" ||
    { cat "$work/inspect.log"; fail "inspect did not name the extra layer"; }
  ;;
fp16_overflow)
  mkdir -p "$work/ck"
  /usr/bin/python3 "$fixtures" scale "$checkpoint" "$work/ck/step_00000004.h5" model/ln_f/weight 1e6 ||
    fail "could not make the overflowing checkpoint"
  fp16=(--set training.precision=fp16)
  expect_fail "$work/resume.log" "step 5: the loss is -?nan in fp16: the forward pass exceeds fp16's range" \
    "${mpi2[@]}" "$exe" train "$deck" "${fp16[@]}" --set run.dir="$work/run" --set checkpoint.dir="$work/ck" \
    --set checkpoint.resume=true --set training.steps=8 --set training.log_interval=1
  no_abort "$work/resume.log"
  grep -q "step 5: fp16 gradients overflowed" "$work/resume.log" && fail "the overflowing step was skipped, not refused"
  [ -e "$work/ck/step_00000008.h5" ] && fail "the run wrote a checkpoint without training"
  expect_fail "$work/gen.log" "generate: checkpoint [^ ]*step_00000004.h5: the logits for generated token 1 are not finite" \
    "${mpi2[@]}" "$exe" generate "$deck" "${fp16[@]}" --checkpoint "$work/ck/step_00000004.h5" --prompt x --tokens 10
  no_abort "$work/gen.log"
  "${mpi2[@]}" "$exe" generate "$deck" "${fp16[@]}" --checkpoint "$work/ck/step_00000004.h5" --prompt x \
    --tokens 10 >"$work/gen.out" 2>/dev/null
  # Nothing sampled after the prompt (which generate shows with its first token, so here not at
  # all; the lines beside it are log lines).
  [ -z "$(grep -a '^x' "$work/gen.out" | grep -av '^x$')" ] || fail "generate sampled from NaN logits: $(od -c "$work/gen.out")"
  expect_fail "$work/eval.log" "the mean loss is -?nan \\(not finite\\)" \
    "${mpi2[@]}" "$exe" eval "$deck" "${fp16[@]}" --checkpoint "$work/ck/step_00000004.h5"
  # From the default scale 2^32 this tiny model overflows for the first steps: a 2-step run
  # trains nothing, legitimately, and must say so.
  "${mpi2[@]}" "$exe" train "$deck" "${fp16[@]}" --set run.dir="$work/fresh" --set checkpoint.dir="$work/fresh/ck" \
    --set training.steps=2 >"$work/fresh.log" 2>&1 || { cat "$work/fresh.log"; fail "the fresh fp16 run failed"; }
  cat "$work/fresh.log"
  grep -q "warning (rank 0): no step of this run updated the weights: all 2 overflowed in fp16" "$work/fresh.log" ||
    fail "a run that skipped every step did not say so"
  ;;
fp16_saved_scale)
  fp16=(--set training.precision=fp16 --set checkpoint.resume=true --set training.steps=5 --set training.log_interval=1)
  for scale in nan inf -inf 0 -1; do
    mkdir -p "$work/$scale/ck"
    /usr/bin/python3 "$fixtures" loss_scale "$checkpoint" "$work/$scale/ck/step_00000004.h5" "$scale" ||
      fail "could not write the loss scale $scale"
    expect_fail "$work/$scale.log" \
      "error \\(rank 0\\): reading checkpoint [^ ]*/$scale/ck/step_00000004.h5: /train attribute loss_scale_bits = -?[0-9]+ is the loss scale $scale: expected a finite number > 0" \
      "${mpi2[@]}" "$exe" train "$deck" "${fp16[@]}" --set run.dir="$work/$scale" --set checkpoint.dir="$work/$scale/ck"
    no_abort "$work/$scale.log"
  done
  # A saved scale below a raised minimum starts at the minimum (this tiny model trains at 2).
  mkdir -p "$work/low/ck"
  /usr/bin/python3 "$fixtures" loss_scale "$checkpoint" "$work/low/ck/step_00000004.h5" 1 || fail "could not write scale 1"
  "${mpi2[@]}" "$exe" train "$deck" "${fp16[@]}" --set training.loss_scale_min=2 --set training.loss_scale_initial=2 \
    --set run.dir="$work/low" --set checkpoint.dir="$work/low/ck" >"$work/low.log" 2>&1 ||
    { cat "$work/low.log"; fail "the resume with a raised loss_scale_min failed"; }
  cat "$work/low.log"
  grep -q "the checkpoint's loss scale 1 is below training.loss_scale_min: the run continues at 2" "$work/low.log" ||
    fail "the restored scale was not raised to training.loss_scale_min"
  grep -qE "step +5/5 .*\| loss scale 2 \|" "$work/low.log" || fail "step 5 did not run at loss scale 2"
  # And one that overflows there: the message names the scale used, the minimum.
  mkdir -p "$work/high/ck"
  /usr/bin/python3 "$fixtures" loss_scale "$checkpoint" "$work/high/ck/step_00000004.h5" 16777216 || fail "could not write 2^24"
  expect_fail "$work/high.log" \
    "step 5: the fp16 gradients overflow even at the smallest loss scale, 1073741824 \\(training.loss_scale_min = 1073741824\\)" \
    "${mpi2[@]}" "$exe" train "$deck" "${fp16[@]}" --set training.loss_scale_min=1073741824 \
    --set run.dir="$work/high" --set checkpoint.dir="$work/high/ck"
  ;;
earlier_run)
  # Issue 30: a second run on the same folders (checkpoint.resume = false, another seed, fewer
  # steps) replaced the first run's checkpoints, truncated its metrics.jsonl and let
  # checkpoint.keep rotate its steps 8-10 away; a later resume then continued the wrong run.
  run=(--set run.dir="$work/run" --set checkpoint.dir="$work/run/ck" --set checkpoint.interval=1
       --set checkpoint.keep=3 --set training.log_interval=1 --set checkpoint.resume=false)
  "${mpi2[@]}" "$exe" train "$deck" "${run[@]}" --set training.steps=10 >"$work/first.log" 2>&1 ||
    { cat "$work/first.log"; fail "the first run failed"; }
  (cd "$work/run" && sha256sum metrics.jsonl ck/*.h5) >"$work/first.sha256"
  cat "$work/first.sha256"
  expect_fail "$work/second.log" \
    "checkpoint.dir = [^ ]*/run/ck holds 3 checkpoints of an earlier run \\(step_00000008.h5, step_00000009.h5 and step_00000010.h5\\), and run.dir = [^ ]*/run holds the metrics.jsonl of an earlier run; this run starts from step 0 \\(checkpoint.resume = false\\)" \
    "${mpi2[@]}" "$exe" train "$deck" "${run[@]}" --set training.steps=3 --set training.seed=7
  no_abort "$work/second.log"
  grep -q "checkpoint.overwrite = true (tptrain train --fresh)" "$work/second.log" || fail "no way out named"
  # A fine-tuning start from one of them, overwrite or not: refused, the checkpoint kept.
  for fresh in "" --fresh; do
    expect_fail "$work/init$fresh.log" "training.init_from = [^ ]*/run/ck/step_00000010.h5 is one of them" \
      "${mpi2[@]}" "$exe" train "$deck" "${run[@]}" $fresh --set training.steps=3 \
      --set training.init_from="$work/run/ck/step_00000010.h5"
  done
  # A metrics.jsonl alone (no checkpoint) is an earlier run's too.
  mkdir -p "$work/metrics_only"
  cp "$work/run/metrics.jsonl" "$work/metrics_only/"
  expect_fail "$work/metrics_only.log" "run.dir = [^ ]*/metrics_only holds the metrics.jsonl of an earlier run; this run starts from step 0" \
    "${mpi2[@]}" "$exe" train "$deck" --set run.dir="$work/metrics_only" --set checkpoint.dir="$work/metrics_only/ck" \
    --set checkpoint.resume=false --set training.steps=1
  cmp -s "$work/run/metrics.jsonl" "$work/metrics_only/metrics.jsonl" || fail "the refused run changed metrics.jsonl"
  (cd "$work/run" && sha256sum -c --quiet "$work/first.sha256") || fail "a refused run changed the first run's files"
  # --fresh: the earlier run's files go, said so; the new run's are all there is.
  cp "$work/run/ck/step_00000010.h5" "$work/foreign.h5"
  "${mpi2[@]}" "$exe" train "$deck" "${run[@]}" --fresh --set training.steps=3 --set training.seed=7 \
    >"$work/fresh.log" 2>&1 || { cat "$work/fresh.log"; fail "train --fresh failed"; }
  grep -q "checkpoint.overwrite = true: .* holds 3 checkpoints of an earlier run .*: deleted, this run starts anew" \
    "$work/fresh.log" || { cat "$work/fresh.log"; fail "--fresh did not say what it deleted"; }
  [ "$(cd "$work/run/ck" && echo *.h5)" = "step_00000001.h5 step_00000002.h5 step_00000003.h5" ] ||
    fail "after --fresh: $(ls "$work/run/ck")"
  [ "$(wc -l <"$work/run/metrics.jsonl")" -eq 3 ] || fail "metrics.jsonl of the fresh run: $(wc -l <"$work/run/metrics.jsonl") records"
  # Rotation keeps another run's checkpoint (copied in), whatever its step; resume continues this run.
  cp "$work/foreign.h5" "$work/run/ck/step_00000000.h5"
  "${mpi2[@]}" "$exe" train "$deck" "${run[@]}" --set checkpoint.resume=true --set training.steps=6 \
    --set training.seed=7 >"$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "the resume failed"; }
  grep -q "resuming from [^ ]*/run/ck/step_00000003.h5" "$work/resume.log" || fail "did not resume from step 3"
  [ "$(cd "$work/run/ck" && echo *.h5)" = "step_00000000.h5 step_00000004.h5 step_00000005.h5 step_00000006.h5" ] ||
    fail "after the resume: $(ls "$work/run/ck")"
  cmp -s "$work/foreign.h5" "$work/run/ck/step_00000000.h5" || fail "the other run's checkpoint changed"
  ;;
*) fail "unknown case $case_name" ;;
esac
echo "PASS: $case_name"
