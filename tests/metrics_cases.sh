#!/usr/bin/env bash
# metrics.jsonl through tptrain train on 2 ranks (docs/design.md, "Run outputs"):
#   cut_line     a resume after a run killed while writing a record (a last line `{"step": ` or
#                half a record): the cut line is dropped with a warning naming it, and the file
#                holds whole records of steps 1..N
#   bad_line     a step beyond int64, garbage, steps out of order: the resume is refused with
#                the file and the line (once, from rank 0) and the file is left as it was
#   size_limit   a file size limit (ulimit -f, EFBIG like a full disk's ENOSPC) reached while
#                logging: the run stops with exit 1 and the file, the step and the reason; the
#                file keeps whole records
# Usage: metrics_cases.sh CASE WORKDIR DECK EXE MPIEXEC-COMMAND...
set -uo pipefail
case_name=$1 work=$2 deck=$3 exe=$4
shift 4
mpi2=("$@")
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

train=(train "$deck" --set training.log_interval=1 --set training.eval_interval=0 --set checkpoint.interval=2)
run=(--set run.dir="$work/run" --set checkpoint.dir="$work/run/ck")
metrics=$work/run/metrics.jsonl

# whole_records N: metrics.jsonl holds whole records of steps 1..N, one per line, nothing else.
whole_records() {
  local why
  why=$(awk -v n="$1" '
    !/^\{"step": [0-9]+, .*\}$/ { print "line " NR " is not a whole record: " $0; bad = 1; exit }
    { s = $2; sub(/,$/, "", s); if (s + 0 != NR) { print "line " NR " holds step " s; bad = 1; exit } }
    END { if (!bad && NR != n) print NR " records, expected " n }' "$metrics")
  [ -z "$why" ] || fail "$metrics: $why"
  [ "$(tail -c1 "$metrics" | od -An -c | tr -d ' ')" = '\n' ] || fail "$metrics: the last line has no newline"
}

# first_run: 4 steps, checkpoints of steps 2 and 4.
first_run() {
  rm -rf "$work/run"
  "${mpi2[@]}" "$exe" "${train[@]}" "${run[@]}" --set training.steps=4 >"$work/first.log" 2>&1 ||
    { cat "$work/first.log"; fail "the first run failed"; }
  whole_records 4
}
# resume LOG: the same run, resumed to step 6.
resume() {
  "${mpi2[@]}" "$exe" "${train[@]}" "${run[@]}" --set training.steps=6 --set checkpoint.resume=true >"$1" 2>&1
}

case $case_name in
cut_line)
  for cut in '{"step": ' '{"step": 5, "loss": 4.1' '{"st'; do
    first_run
    printf '%s' "$cut" >>"$metrics"
    resume "$work/resumed.log"
    status=$?
    cat "$work/resumed.log"
    [ "$status" -eq 0 ] || fail "the resume after a cut line '$cut' failed ($status)"
    grep -qF "metrics.jsonl:5: the last line was cut off (the run that wrote it ended in the middle of it): dropped '$cut'" \
      "$work/resumed.log" || fail "no warning naming the cut line 5 '$cut'"
    whole_records 6
  done
  echo "a cut last line is dropped with a warning; the resumed file holds whole records 1..6"
  ;;
bad_line)
  check_refused() { # WHAT LINE-REGEX: the resume is refused once, the file is left as it was
    cp "$metrics" "$work/before"
    resume "$work/resumed.log"
    status=$?
    cat "$work/resumed.log"
    [ "$status" -ne 0 ] && [ "$status" -lt 128 ] || fail "$1: expected a clean failure, got status $status"
    [ "$(grep -cE "tptrain: error.*metrics\.jsonl:$2" "$work/resumed.log")" -eq 1 ] ||
      fail "$1: expected one error naming metrics.jsonl:$2"
    grep -q "stoll" "$work/resumed.log" && fail "$1: 'stoll' in the output"
    cmp -s "$metrics" "$work/before" || fail "$1: the refused resume changed metrics.jsonl"
  }
  first_run
  echo '{"step": 99999999999999999999, "loss": 1.0}' >>"$metrics"
  check_refused "a step beyond int64" "5: the step '99999999999999999999' is not a whole number from 1 to 9223372036854775807"
  first_run
  printf '{"step": 99999999999999999999}' >>"$metrics"  # a whole record, even without its newline
  check_refused "a last step beyond int64" "5: the step '99999999999999999999'"
  first_run
  sed -i '2s/.*/garbage/' "$metrics"
  check_refused "garbage in the middle" "2: not a metrics record \(expected \{\"step\": N, \.\.\.\}\): 'garbage'"
  first_run
  sed -i '3s/"step": 3,/"step": 1,/' "$metrics"
  check_refused "steps out of order" "3: step 1 follows step 2"
  echo "every bad line refused with file:line, the file untouched"
  ;;
size_limit)
  # The limit applies to the ranks only (mpiexec's own files stay free) and to every file they
  # write; TCP between the ranks, as shared-memory transport files count against the limit too.
  limited=("${mpi2[@]}" --mca btl self,tcp bash -c 'ulimit -f 16 && exec "$@"' limited "$exe")
  "${limited[@]}" train "$deck" --set training.log_interval=1 --set training.eval_interval=0 \
    --set checkpoint.interval=0 --set training.steps=1000 "${run[@]}" >"$work/full.log" 2>&1
  status=$?
  cat "$work/full.log"
  [ "$status" -ne 0 ] && [ "$status" -lt 128 ] || fail "expected a clean failure, got status $status"
  grep -q "exited on signal" "$work/full.log" && fail "a rank died of a signal"
  [ "$(grep -cE "tptrain: error.*cannot write the record of step [0-9]+ to [^ ]*metrics\.jsonl: File too large; the file ends with the record of step [0-9]+: the run stops here" "$work/full.log")" -eq 1 ] ||
    fail "expected one error naming metrics.jsonl, the step and 'File too large'"
  step=$(sed -n 's/.*cannot write the record of step \([0-9]*\) to.*/\1/p' "$work/full.log")
  whole_records $((step - 1))
  echo "stopped at step $step with the reason; the file holds whole records 1..$((step - 1))"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
