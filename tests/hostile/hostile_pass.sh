#!/usr/bin/env bash
# Hostile / careless-user pass over the tptrain executable. Run by hand (not in CI):
#
#   tests/hostile/hostile_pass.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds the tptrain binary; OUT_DIR receives table.md (the Markdown table printed on
# stdout), cases/NNN_<case>.{cmd,out,err} (each case's command line and output) and the fixtures
# and run directories (fix/, runs/, work/). Everything under OUT_DIR/{cases,fix,runs,work,mnt} is
# deleted at the start. Each case runs one command (or a short sequence) under `timeout` and is
# classified from its exit status and output:
#
#   ok                exit 0 (expect=ok/any/same/stream), or a job that died as it was meant to
#                     (expect=killed)
#   clean error       exit 1..125 with a `tptrain: error` line (or a CLI11 usage error) on stderr
#   SILENT WRONG      exit 0 where failure was expected, or a success whose result differs from
#                     the pristine one (expect=same: eval loss, generated text, resumed loss)
#   UNEXPECTED ERROR  a clean error where success was expected
#   NO MESSAGE        exit 1..125 without any error line
#   HANG              killed by the timeout (or ranks left running after their launcher died)
#   CRASH             killed by a signal, or "Segmentation fault", "core dumped", "terminate
#                     called", "Aborted", "MPI_ABORT was invoked", "exited on signal" ... in the
#                     output without a tptrain error line before it
#
# expect=any: either success or a clean error is right. The exit status is non-zero when any case
# is HANG, CRASH, SILENT WRONG, UNEXPECTED ERROR or NO MESSAGE.
#
# Environment: CASES=REGEX (run only the cases whose name matches; fixtures are made as needed),
# TIMEOUT=30 (seconds per case; the slowest legitimate case takes ~3 s), MPIEXEC="mpiexec -n 2 --oversubscribe --allow-run-as-root",
# PY=/usr/bin/python3 (needs h5py), FLIPS=40 (byte-flip copies), SEED=20240520, VMEM_KB=8000000
# (ulimit -v for every process of a case, so that a huge model fails to allocate instead of
# driving the machine into the OOM killer).
set -uo pipefail

if [ $# -ne 2 ]; then
  sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" && OUT=$(cd "$2" && pwd) || exit 2
case $OUT in *[[:space:]]*) echo "hostile_pass: OUT_DIR must not contain white space" >&2; exit 2 ;; esac
EXE=$BUILD/tptrain
[ -x "$EXE" ] || { echo "hostile_pass: $EXE is not an executable" >&2; exit 2; }
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
CASES=${CASES:-.}
TIMEOUT=${TIMEOUT:-30}
PY=${PY:-/usr/bin/python3}
FLIPS=${FLIPS:-40}
SEED=${SEED:-20240520}
VMEM_KB=${VMEM_KB:-8000000}
read -r -a MPI <<<"${MPIEXEC:-mpiexec -n 2 --oversubscribe --allow-run-as-root}"
MPI1=("${MPI[@]}")
for i in "${!MPI1[@]}"; do [ "${MPI1[$i]}" = "-n" ] && MPI1[$((i + 1))]=1; done
MPI3=("${MPI[@]}")
for i in "${!MPI3[@]}"; do [ "${MPI3[$i]}" = "-n" ] && MPI3[$((i + 1))]=3; done
FIXPY=$HERE/hostile_fixtures.py
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1

CASEDIR=$OUT/cases FIX=$OUT/fix RUNS=$OUT/runs WORK=$OUT/work MNT=$OUT/mnt
for m in "$MNT"/*; do mountpoint -q "$m" 2>/dev/null && umount "$m"; done
rm -rf "$CASEDIR" "$FIX" "$RUNS" "$WORK" "$MNT" "$OUT/table.md" "$OUT/table.md.notes"
mkdir -p "$CASEDIR" "$FIX" "$RUNS" "$WORK" "$MNT"
DECK=$FIX/valid.toml # a copy of tests/data/cli/valid.toml next to its corpus.txt and corpus_valid.txt
cp "$SRC/tests/data/cli/valid.toml" "$SRC/tests/data/cli/corpus.txt" "$SRC/tests/data/cli/corpus_valid.txt" "$FIX/"

# ---- bookkeeping ------------------------------------------------------------------------------

N=0
declare -A COUNT=()
BG_PIDS=()
cleanup() {
  local p
  for p in "${BG_PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  for m in "$MNT"/*; do mountpoint -q "$m" 2>/dev/null && umount "$m" 2>/dev/null; done
}
trap cleanup EXIT
trap 'echo "hostile_pass: interrupted" >&2; exit 130' INT TERM

note() { echo "hostile_pass: $*" >&2; echo "<!-- note: $* -->" >>"$OUT/table.md.notes"; }
selected() { [[ $1 =~ $CASES ]]; }
# The binary may be relinked by others while the pass runs: wait for it (up to 15 minutes) rather
# than report "mpiexec was unable to launch" as a crash, and note every change of the binary.
EXE_STAMP=$(stat -c %Y "$EXE")
wait_for_exe() {
  local i=0
  while [ ! -x "$EXE" ] && [ $i -lt 900 ]; do
    [ $i -eq 0 ] && echo "hostile_pass: $EXE is missing (being rebuilt?): waiting" >&2
    sleep 1
    i=$((i + 1))
  done
  [ $i -gt 0 ] && sleep 5 # let the linker finish
  local stamp
  stamp=$(stat -c %Y "$EXE" 2>/dev/null)
  if [ "$stamp" != "$EXE_STAMP" ]; then
    note "the binary changed before case $((N + 1)) ($(date -d "@$EXE_STAMP" +%T) -> $(date -d "@${stamp:-0}" +%T))"
    EXE_STAMP=$stamp
  fi
}
any_selected() { local n; for n; do selected "$n" && return 0; done; return 1; }
now_ms() { date +%s%3N; }

# One table cell: printable ASCII, `|` escaped, cut to 110 characters.
cell() {
  local s
  s=$(printf '%s' "$1" | tr '\n\t' '  ' | LC_ALL=C tr -c '[:print:]' '?' | cut -c1-110)
  printf '%s' "${s//|/\\|}"
}

HEADER='| # | case | expect | outcome | seconds | first message |
|---:|---|---|---|---:|---|'
echo "$HEADER" | tee "$OUT/table.md"
record() { # NAME EXPECT OUTCOME SECONDS MESSAGE
  local row
  row="| ${CASE_N:-$N} | $1 | $2 | $3 | $4 | $(cell "$5") |"
  COUNT[$3]=$((${COUNT[$3]:-0} + 1))
  echo "$row" | tee -a "$OUT/table.md"
}

new_log() { # NAME -> LOG: the log prefix of a new case
  N=$((N + 1))
  CASE_N=$N
  LOG=$(printf '%s/%03d_%s' "$CASEDIR" "$N" "$1")
}

# First tptrain error line of a file (with the next line when it ends in ':', as "invalid deck
# X:\n<problem>" does), else nothing.
first_error() {
  awk '/tptrain: error/ { line = $0
         if (line ~ /:[ \t]*$/ && (getline nxt) > 0) line = line " " nxt
         print line; exit }' "$@" 2>/dev/null
}
CRASH_RE='Segmentation fault|core dumped|terminate called|Aborted|MPI_ABORT was invoked|exited on signal|Floating point exception|Bus error|Illegal instruction|double free|free\(\): invalid|malloc\(\): |stack smashing|AddressSanitizer'
last_line() { tr -d '\000' <"$1" 2>/dev/null | grep -av '^[[:space:]]*$' | tail -1; }

# classify NAME EXPECT RC SECONDS LOG [VERIFY]: VERIFY LOG prints why a success is wrong and
# returns non-zero (used for expect=same and for expect=ok cases that must show something).
classify() {
  local name=$1 expect=$2 rc=$3 ms=$4 log=$5 verify=${6:-} limit=${7:-$TIMEOUT}
  local err=$log.err out=$log.out secs outcome msg errline crashline="" tags=""
  secs=$(awk -v ms="$ms" 'BEGIN { printf "%.1f", ms / 1000 }')
  errline=$(first_error "$err" "$out")
  local usage=""
  if [ -z "$errline" ] && grep -aq 'Run with --help for more information' "$err" "$out" 2>/dev/null; then
    # CLI11's message is the line before "Run with --help ..." (mpiexec's banners come around it).
    usage=$(awk '/Run with --help for more information/ { print prev; exit } NF { prev = $0 }' "$err")
    [ -n "$usage" ] || usage=$(awk '/Run with --help for more information/ { print prev; exit } NF { prev = $0 }' "$out")
    errline="usage: $usage"
  fi
  # A crash pattern counts unless a tptrain error line came before it (in stderr).
  local cl el
  cl=$(grep -anE "$CRASH_RE" "$err" 2>/dev/null | head -1)
  if [ -n "$cl" ]; then
    el=$(grep -an 'tptrain: error' "$err" | head -1 | cut -d: -f1)
    if [ -z "$el" ] || [ "${el:-0}" -gt "${cl%%:*}" ]; then crashline=${cl#*:}; else tags+=" [then: ${cl#*:}]"; fi
  elif grep -aqE "$CRASH_RE" "$out" 2>/dev/null && [ -z "$errline" ]; then
    crashline=$(grep -aE "$CRASH_RE" "$out" | head -1)
  fi
  local ranks
  ranks=$(grep -ao 'tptrain: error (rank [0-9]*)' "$err" 2>/dev/null | sort -u | wc -l)
  [ "$ranks" -gt 1 ] && tags+=" [error from $ranks ranks]"
  grep -aq 'HDF5-DIAG' "$err" "$out" 2>/dev/null && tags+=" [HDF5-DIAG dump]"
  local warning
  warning=$(grep -a -m1 'tptrain: warning' "$err" 2>/dev/null | sed 's/^tptrain: warning[^:]*: //')
  [ -n "$warning" ] && [ "$rc" -eq 0 ] && tags+=" [warning: $warning]"

  local timed_out=""
  { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ "$ms" -ge $((limit * 1000)) ] && timed_out=yes
  if [ "$expect" = killed ] && [ -z "$timed_out" ]; then
    # A job meant to die (a kill hook): any non-zero exit is what was asked for.
    if [ "$rc" -eq 0 ]; then
      outcome="SILENT WRONG" msg="exit 0, but the job was to be killed: $(last_line "$out")"
    else
      outcome=ok msg="killed as meant (rc $rc): $(grep -a -m1 -E 'KILL|exited on signal|tptrain: error' "$err")"
    fi
    record "$name" "$expect" "$outcome" "$secs" "$msg"
    return
  fi
  if [ -n "$timed_out" ]; then
    if [ "$expect" = stream ]; then
      local bytes
      bytes=$(grep -a -A1000000 "^$STREAM_PROMPT" "$out" | wc -c)
      if [ "$bytes" -gt 40 ]; then
        outcome=ok msg="text streamed: $bytes bytes before the timeout (${limit}s) stopped it"
      else
        outcome=HANG msg="only $bytes bytes of text after ${limit}s: $(last_line "$err")"
      fi
    else
      outcome=HANG msg="killed after ${limit}s; last output: $(last_line "$err")"
      [ -s "$err" ] || msg="killed after ${limit}s; last output: $(last_line "$out")"
    fi
  elif [ -n "$crashline" ] || [ "$rc" -ge 128 ]; then
    outcome=CRASH msg="rc $rc: ${crashline:-killed by signal $((rc - 128))} ${errline:+/ $errline}"
  elif [ "$rc" -eq 0 ]; then
    case $expect in
    fail) outcome="SILENT WRONG" msg="exit 0: $(last_line "$out")" ;;
    *)
      outcome=ok msg=$(last_line "$out")
      if [ -n "$verify" ]; then
        local why
        if ! why=$($verify "$log" 2>&1); then outcome="SILENT WRONG" msg=$why; fi
      fi
      ;;
    esac
  elif [ -n "$errline" ]; then
    case $expect in
    ok | stream) outcome="UNEXPECTED ERROR" ;;
    *) outcome="clean error" ;;
    esac
    msg=$errline
    # A refused case's verify checks the refusal (the error names the key, nothing was left behind).
    if [ "$outcome" = "clean error" ] && [ -n "$verify" ]; then
      local why
      if ! why=$($verify "$log" 2>&1); then outcome="SILENT WRONG" msg="$errline; but: $why"; fi
    fi
  else
    outcome="NO MESSAGE" msg="rc $rc, no error line; last output: $(last_line "$err")"
  fi
  msg=${msg//$OUT/OUT}
  # Shorter: "invalid deck D: D:12:" -> "invalid deck D:12:", "invalid deck D: --set k=v: k = v:" -> "--set k=v:"
  msg=$(printf '%s' "$msg" | sed -E -e 's/invalid deck ([^ ]+): \1:/invalid deck \1:/' \
    -e 's/invalid deck [^ ]+: (--set [^ ]+): /\1: /' -e 's/--set ([^=]+)=([^ ]*): \1 = [^:]*: /--set \1=\2: /')
  record "$name" "$expect" "$outcome" "$secs" "$msg$tags"
}

# run_case NAME EXPECT [timeout=S] [verify=FN] -- COMMAND...   (in $WORK, stdin /dev/null)
run_case() {
  local name=$1 expect=$2 t=$TIMEOUT verify="" needs=""
  shift 2
  while [ "$1" != "--" ]; do
    case $1 in
    timeout=*) t=${1#timeout=} ;;
    verify=*) verify=${1#verify=} ;;
    needs=ck) needs=ck ;;
    esac
    shift
  done
  shift
  selected "$name" || return 0
  if [ -n "$needs" ]; then ensure_ck || return 0; fi
  wait_for_exe
  local log t0 rc
  new_log "$name"
  log=$LOG
  printf '%q ' "$@" >"$log.cmd"
  echo >>"$log.cmd"
  t0=$(now_ms)
  (cd "$WORK" && ulimit -v "$VMEM_KB" && exec timeout -k 10 "$t" "$@") </dev/null >"$log.out" 2>"$log.err"
  rc=$?
  echo "rc=$rc" >>"$log.cmd"
  CASE_N=${log##*/}
  CASE_N=$((10#${CASE_N%%_*}))
  classify "$name" "$expect" "$rc" $(($(now_ms) - t0)) "$log" "$verify" "$t"
}

# A case in the background: bg_start NAME TIMEOUT COMMAND...; then bg_finish EXPECT [VERIFY].
bg_start() {
  wait_for_exe
  BG_NAME=$1 BG_T=$2
  shift 2
  new_log "$BG_NAME"
  BG_LOG=$LOG BG_N=$N
  printf '%q ' "$@" >"$BG_LOG.cmd"
  echo >>"$BG_LOG.cmd"
  BG_T0=$(now_ms)
  (cd "$WORK" && ulimit -v "$VMEM_KB" && exec timeout -k 10 "$BG_T" "$@") </dev/null >"$BG_LOG.out" 2>"$BG_LOG.err" &
  BG_PID=$!
  BG_PIDS+=("$BG_PID")
}
bg_finish() {
  wait "$BG_PID"
  local rc=$?
  echo "rc=$rc" >>"$BG_LOG.cmd"
  CASE_N=$BG_N
  classify "$BG_NAME" "$1" "$rc" $(($(now_ms) - BG_T0)) "$BG_LOG" "${2:-}" "$BG_T"
}

descendants() {
  local p
  for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    echo "$p"
    descendants "$p"
  done
}
# The pid of world rank R among the descendants of ROOT (a tptrain process).
rank_pid() {
  local p
  for p in $(descendants "$1"); do
    case $(readlink "/proc/$p/exe" 2>/dev/null) in "$EXE_REAL"*) ;; *) continue ;; esac
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}
EXE_REAL=$(readlink -f "$EXE")
launcher_pid() { # the mpiexec under a bg `timeout`
  local p
  for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do echo "$p"; return; done
}
wait_for() { # SECONDS COMMAND...: poll until COMMAND succeeds
  local end=$(($(date +%s) + $1))
  shift
  until "$@"; do
    [ "$(date +%s)" -ge "$end" ] && return 1
    sleep 0.1
  done
}
alive() { kill -0 "$1" 2>/dev/null; }
dead() { ! kill -0 "$1" 2>/dev/null; }

# ---- fixtures -------------------------------------------------------------------------------

TRAIN=("${MPI[@]}" "$EXE" train "$DECK")
rundir() { echo "--set" "run.dir=$RUNS/$1"; }
CK_RUN=$RUNS/fixture
CK2=$CK_RUN/checkpoints/step_00000002.h5
CK4=$CK_RUN/checkpoints/step_00000004.h5
REF=$FIX/ref
STREAM_PROMPT="It is"
CK_READY=""
# The checkpoint fixture (steps 2 and 4 of valid.toml on 2 ranks) and the pristine results the
# damaged copies are compared with.
ensure_ck() {
  [ -n "$CK_READY" ] && { [ "$CK_READY" = yes ]; return; }
  CK_READY=no
  mkdir -p "$REF"
  local save=$CASES
  CASES=.
  run_case fixture_train ok -- "${TRAIN[@]}" --set run.dir="$CK_RUN" --set checkpoint.interval=2
  if [ ! -f "$CK4" ]; then
    CASES=$save
    note "fixture training failed: checkpoint cases skipped"
    return 1
  fi
  ref_case fixture_ref_eval eval "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4"
  ref_case fixture_ref_inspect inspect "$EXE" inspect "$CK4"
  ref_case fixture_ref_generate generate "${MPI[@]}" "$EXE" generate "$DECK" --checkpoint "$CK4" \
    --prompt "$STREAM_PROMPT" --tokens 24 --temperature 0
  mkdir -p "$RUNS/fixture_ref_resume/ck"
  cp "$CK4" "$RUNS/fixture_ref_resume/ck/"
  ref_case fixture_ref_resume resume "${TRAIN[@]}" $(rundir fixture_ref_resume) \
    --set checkpoint.dir="$RUNS/fixture_ref_resume/ck" --set checkpoint.resume=true \
    --set training.steps=6 --set training.log_interval=1
  CASES=$save
  CK_READY=yes
}
ref_case() { # NAME REFNAME COMMAND...: a fixture case whose output is kept as $REF/REFNAME.out
  local name=$1 ref=$2
  shift 2
  run_case "$name" ok -- "$@"
  cp "$CASEDIR/$(printf %03d $N)_$name.out" "$REF/$ref.out"
}

eval_loss_of() { grep -ao '"eval_loss": *[^,}]*' "$1" | head -1; }
# expect=same is "the pristine result, or a clean refusal": classify() runs these on refused
# cases too, and a damaged file refused with a tptrain error is a right answer.
refused() { grep -aq "tptrain: error" "$1.out" "$1.err" 2>/dev/null; }
verify_eval_same() {
  refused "$1" && return 0
  local a b
  a=$(eval_loss_of "$1.out") b=$(eval_loss_of "$REF/eval.out")
  [ -n "$a" ] && [ "$a" = "$b" ] && return 0
  echo "eval exit 0 with ${a:-no eval_loss}, the pristine checkpoint gives $b"
  return 1
}
inspect_rows() { grep -aE '^ +(model|optimizer)[^ ]*/' "$1" | sed 's/  */ /g'; }
verify_inspect_same() {
  refused "$1" && return 0
  local d
  d=$(diff <(inspect_rows "$1.out") <(inspect_rows "$REF/inspect.out") | grep -a '^<' | head -1)
  [ -z "$d" ] && return 0
  echo "inspect exit 0 but its dataset table differs from the pristine file's: ${d#< }"
  return 1
}
generated_text() { grep -a -A1000 "^$STREAM_PROMPT" "$1"; }
verify_gen_same() {
  refused "$1" && return 0
  [ -n "$(generated_text "$1.out")" ] && [ "$(generated_text "$1.out")" = "$(generated_text "$REF/generate.out")" ] && return 0
  echo "generate exit 0 but the text differs from the pristine checkpoint's: $(generated_text "$1.out" | head -1)"
  return 1
}
loss_lines() { grep -aoE 'step +[0-9]+/[0-9]+ \| loss [^ ]+' "$1" | sed 's/  */ /g'; }
verify_resume_same() {
  refused "$1" && return 0
  grep -aq 'resuming from' "$1.out" || { echo "exit 0 without 'resuming from': started over silently"; return 1; }
  [ "$(loss_lines "$1.out")" = "$(loss_lines "$REF/resume.out")" ] && return 0
  echo "resumed, but the losses differ from the pristine resume: $(loss_lines "$1.out" | tail -1) vs $(loss_lines "$REF/resume.out" | tail -1)"
  return 1
}
verify_resumed() {
  grep -aq 'resuming from' "$1.out" && return 0
  echo "exit 0 without 'resuming from': the run started over"
  return 1
}
verify_not_resumed() {
  grep -aq 'resuming from' "$1.out" || return 0
  echo "resumed from a file that is not a complete checkpoint: $(grep -a 'resuming from' "$1.out" | head -1)"
  return 1
}
verify_streamed() { return 0; }

mkdeck() { # NAME: the deck text on stdin -> $FIX/decks/NAME.toml (path on stdout)
  mkdir -p "$FIX/decks"
  cat >"$FIX/decks/$1.toml"
  echo "$FIX/decks/$1.toml"
}
# valid.toml with one sed edit, as a new deck
deck_sed() { sed "$2" "$DECK" | sed 's#= "corpus.txt"#= "../corpus.txt"#; s#= "corpus_valid.txt"#= "../corpus_valid.txt"#' | mkdeck "$1"; }

LONGNAME=$(printf 'c%.0s' $(seq 300))
LONGPATH=$FIX$(for _ in $(seq 25); do printf '/%s' "$(printf 'd%.0s' $(seq 199))"; done)/x.txt # ~5000 chars
echo "not a directory" >"$FIX/regular_file"
mkfifo "$FIX/fifo.toml" "$FIX/fifo.txt" "$FIX/fifo.h5"
mkdir -p "$FIX/a_dir.toml" "$FIX/a_dir.txt" "$FIX/a_dir.h5"

# ---- 1. command line and decks --------------------------------------------------------------

group_cli() {
  run_case cli_no_args fail -- "$EXE"
  run_case cli_unknown_subcommand fail -- "$EXE" frobnicate
  run_case cli_help ok -- "$EXE" --help
  run_case cli_train_help ok -- "$EXE" train --help
  run_case cli_version ok -- "$EXE" --version
  run_case cli_train_no_deck fail -- "$EXE" train
  run_case cli_unknown_option fail -- "$EXE" check "$DECK" --frobnicate
  run_case cli_set_without_value fail -- "$EXE" check "$DECK" --set
  run_case cli_two_decks fail -- "$EXE" check "$DECK" "$DECK"
  run_case cli_inspect_no_file fail -- "$EXE" inspect
  run_case cli_eval_no_checkpoint fail -- "$EXE" eval "$DECK"
  run_case cli_generate_no_prompt fail -- "$EXE" generate "$DECK" --checkpoint "$DECK"
  run_case cli_check_valid ok -- "$EXE" check "$DECK"
}

group_deck_files() {
  head -c 4096 /dev/urandom >"$FIX/garbage.toml" 2>/dev/null
  : >"$FIX/empty.toml"
  { cat "$DECK"; for i in $(seq 70000); do echo "# padding comment line $i ......."; done; } >"$FIX/big_comments.toml"
  { cat "$DECK"; for i in $(seq 60000); do echo "unknown_key_$i = $i"; done; } >"$FIX/big_unknown.toml"
  printf '[model]\nlayers = 2\x00\nhidden = 32\n' >"$FIX/nul_byte.toml"
  { printf '\xef\xbb\xbf'; cat "$DECK"; } >"$FIX/bom.toml"
  sed 's/$/\r/' "$DECK" >"$FIX/crlf.toml"
  ln -sf /dev/zero "$FIX/zero.toml"
  ln -sf loop.toml "$FIX/loop.toml"
  local what path expect
  while read -r what path expect; do
    run_case "deck_${what}_check" "$expect" -- "$EXE" check "$path"
    case $what in missing | directory | devzero | urandom | fifo | empty | garbage | big_unknown)
      run_case "deck_${what}_train" "$expect" -- "${MPI[@]}" "$EXE" train "$path" $(rundir "deck_$what") ;;
    esac
  done <<EOF
missing $FIX/no_such_deck.toml fail
directory $FIX/a_dir.toml fail
devzero /dev/zero fail
urandom /dev/urandom fail
fifo $FIX/fifo.toml fail
symlink_devzero $FIX/zero.toml fail
symlink_loop $FIX/loop.toml fail
empty $FIX/empty.toml fail
garbage $FIX/garbage.toml fail
nul_byte $FIX/nul_byte.toml fail
big_comments $FIX/big_comments.toml any
big_unknown $FIX/big_unknown.toml fail
utf8_bom $FIX/bom.toml any
crlf $FIX/crlf.toml ok
long_path $LONGPATH.toml fail
EOF
}

group_deck_syntax() {
  local d
  d=$(printf '[model]\nlayers = "2\n' | mkdeck unclosed_string) && run_case deck_syntax_unclosed_string fail -- "$EXE" check "$d"
  d=$(printf '[model\nlayers = 2\n' | mkdeck unclosed_table) && run_case deck_syntax_unclosed_table fail -- "$EXE" check "$d"
  d=$(deck_sed double_eq 's/^layers = 2$/layers = = 2/') && run_case deck_syntax_double_equals fail -- "$EXE" check "$d"
  d=$(deck_sed dup_key 's/^layers = 2$/layers = 2\nlayers = 3/') && run_case deck_syntax_duplicate_key fail -- "$EXE" check "$d"
  d=$(deck_sed dup_table 's/^\[parallel\]$/[model]\nhidden = 64\n[parallel]/') && run_case deck_syntax_duplicate_table fail -- "$EXE" check "$d"
  d=$(deck_sed bad_escape 's#^train = .*#train = "a\\qb.txt"#') && run_case deck_syntax_bad_escape fail -- "$EXE" check "$d"
  d=$(deck_sed bare_word 's/^layers = 2$/layers = two/') && run_case deck_syntax_bare_word fail -- "$EXE" check "$d"
  d=$(printf '[model]\nlayers = [1, 2\n' | mkdeck unterminated_array) && run_case deck_syntax_unterminated_array fail -- "$EXE" check "$d"
  d=$(deck_sed huge_int 's/^layers = 2$/layers = 99999999999999999999999999/') && run_case deck_syntax_int_overflow fail -- "$EXE" check "$d"
  d=$(deck_sed control_char 's/^layers = 2$/layers = 2\nnote = "a\x01b"/') && run_case deck_syntax_control_char fail -- "$EXE" check "$d"
  d=$(deck_sed bad_utf8 's/^layers = 2$/layers = 2 # \xff\xfe/') && run_case deck_syntax_invalid_utf8 fail -- "$EXE" check "$d"
  d=$({ printf 'a = '; head -c 100000 /dev/zero | tr '\0' '['; } | mkdeck deep_arrays) && run_case deck_syntax_deep_arrays fail -- "$EXE" check "$d"
  d=$({ printf 'a = '; for _ in $(seq 20000); do printf '{b = '; done; } | mkdeck deep_tables) && run_case deck_syntax_deep_inline_tables fail -- "$EXE" check "$d"
  d=$({ printf '[model]\n'; head -c 1048576 /dev/zero | tr '\0' 'k'; printf ' = 1\n'; } | mkdeck megabyte_key) && run_case deck_syntax_megabyte_key fail -- "$EXE" check "$d"
}

group_deck_keys() {
  local name sed_expr expect d
  while IFS='|' read -r name sed_expr expect; do
    d=$(deck_sed "$name" "$sed_expr") && run_case "deck_$name" "$expect" -- "$EXE" check "$d"
  done <<'EOF'
unknown_key_typo|s/^layers = 2$/layers = 2\nhiden = 32/|fail
unknown_section|s/^\[model\]$/[modle]/|fail
unknown_toplevel_key|1s/^/foo = 1\n/|fail
section_as_value|1s/^/model = 5\n/|fail
key_as_table|s/^\[parallel\]$/[model.layers]\n[parallel]/|fail
array_of_tables|s/^\[model\]$/[[model]]/|fail
type_string_int|s/^layers = 2$/layers = "2"/|fail
type_float_int|s/^layers = 2$/layers = 2.5/|fail
type_bool_int|s/^hidden = 32$/hidden = true/|fail
type_array_int|s/^heads = 4$/heads = [4]/|fail
type_date_int|s/^layers = 2$/layers = 1979-05-27/|fail
type_table_int|s/^layers = 2$/layers = { n = 2 }/|fail
type_int_path|s#^train = .*#train = 5#|fail
type_string_bool|s/^\[optimizer\]$/[checkpoint]\nresume = "yes"\n[optimizer]/|fail
type_string_float|s/^warmup_steps = 1$/warmup_steps = 1\nlr = "fast"/|fail
missing_data_train|/^train = /d|fail
EOF
}

# --set values: each goes through `check` (validation), a subset also through `train` on 2
# ranks (values that pass validation but cannot run).
group_numbers() {
  local set expect train_expect
  while read -r set expect train_expect; do
    run_case "num_check_${set//[^A-Za-z0-9_.=-]/_}" "$expect" -- "$EXE" check "$DECK" --set "$set"
    [ "$train_expect" = - ] && continue
    local steps=(--set training.steps=2)
    [[ $set == training.steps=* ]] && steps=()
    run_case "num_train_${set//[^A-Za-z0-9_.=-]/_}" "$train_expect" -- "${TRAIN[@]}" --set "$set" \
      "${steps[@]}" $(rundir "num_$N")
  done <<'EOF'
model.layers=0 fail fail
model.layers=-1 fail -
model.layers=2147483648 fail -
model.hidden=-1 fail fail
model.hidden=0 fail -
model.hidden=131072 any fail
model.hidden=2147483647 fail fail
model.heads=0 fail -
model.heads=3 fail -
model.ffn_hidden=3 fail -
model.seq_length=0 fail -
model.seq_length=65536 any fail
model.vocab_size=0 fail -
model.vocab_size=2147483647 any fail
model.vocab_size=100 any fail
model.vocab_pad_multiple=0 fail -
model.vocab_pad_multiple=2147483647 any fail
optimizer.lr=1e999 fail fail
optimizer.lr=nan fail fail
optimizer.lr=inf fail -
optimizer.lr=-1 fail -
optimizer.min_lr=-1 fail -
optimizer.warmup_steps=1000 fail -
optimizer.warmup_steps=-1 fail -
optimizer.beta1=1.0 fail -
optimizer.beta2=-0.5 fail -
optimizer.eps=-1 fail -
optimizer.weight_decay=nan fail -
optimizer.decay="exp" fail -
training.steps=0 fail -
training.steps=-1 fail -
training.steps=9223372036854775807 fail fail
training.steps=9223372036854775808 fail -
training.global_batch=0 fail -
training.micro_batch=0 fail -
training.micro_batch=3 fail -
training.global_batch=2147483647 fail -
training.log_interval=0 fail -
training.eval_interval=-1 fail -
training.eval_windows=0 fail -
training.grad_clip=-1 fail -
training.grad_clip=nan fail -
training.precision="bf16" ok -
training.precision="fp16" ok -
training.precision="fp64" fail -
training.loss_scale_initial=0 fail -
training.loss_scale_window=0 fail -
training.loss_scale_hysteresis=0 fail -
training.loss_scale_min=8589934592 fail -
training.loss_scale_growth_factor=1 fail -
training.loss_scale_backoff_factor=1 fail -
training.seed=-1 any -
checkpoint.keep=0 fail -
checkpoint.interval=-1 fail -
parallel.tensor=0 fail -
parallel.tensor=-2 fail -
parallel.tensor=3 fail -
parallel.tensor=1048576 fail -
parallel.pipeline=3 fail -
parallel.data=0 fail -
EOF
}

group_set_syntax() {
  local i=0 set expect
  while IFS='|' read -r set expect; do
    i=$((i + 1))
    run_case "set_syntax_${i}_${set//[^A-Za-z0-9_.=-]/_}" "$expect" -- "$EXE" check "$DECK" --set "$set"
  done <<'EOF'
=1|fail
a|fail
model.layers|fail
model.layers=|fail
.=|fail
model.=3|fail
.layers=3|fail
model.layers.x=1|fail
model=3|fail
model.layers=2=3|fail
|fail
model.layers=0x10|any
model.layers=[|fail
data.train=|fail
optimizer.lr=1e999|fail
model.layers=2 # comment|any
EOF
  run_case set_syntax_newline_in_value fail -- "$EXE" check "$DECK" --set $'model.layers=2\nhidden = 64'
  run_case set_syntax_train_lr_1e999 fail -- "${TRAIN[@]}" --set optimizer.lr=1e999 $(rundir set_lr)
}

# Llama decks (model.architecture, issue 23): each bad combination is refused by `check` with an
# error that names the key; verify_names_key checks the first error line names it.
names_key() { # KEY LOG: the error names KEY
  grep -aq "$1" "$2.err" && return 0
  echo "the error does not name $1: $(first_error "$2.err" "$2.out")"
  return 1
}
verify_names_kv_heads() { names_key model.kv_heads "$1"; }
verify_names_tensor_layouts() { names_key 'nearest valid layouts are parallel.tensor' "$1"; }
verify_names_head_dim() { names_key 'even head dimension' "$1"; }
verify_names_norm_eps() { names_key model.norm_eps "$1"; }
verify_names_rope_theta() { names_key model.rope_theta "$1"; }
verify_names_architecture() { names_key model.architecture "$1"; }
group_llama() {
  local L=(--set model.architecture=llama)
  run_case llama_check_valid ok -- "$EXE" check "$DECK" "${L[@]}" --set model.kv_heads=2
  run_case llama_kv_heads_not_divisor fail verify=verify_names_kv_heads -- "$EXE" check "$DECK" "${L[@]}" \
    --set model.kv_heads=3
  run_case llama_kv_heads_zero fail verify=verify_names_kv_heads -- "$EXE" check "$DECK" "${L[@]}" --set model.kv_heads=0
  run_case llama_kv_heads_above_heads fail verify=verify_names_kv_heads -- "$EXE" check "$DECK" "${L[@]}" \
    --set model.kv_heads=8
  run_case llama_kv_heads_tensor fail verify=verify_names_tensor_layouts -- "$EXE" check "$DECK" "${L[@]}" \
    --set model.kv_heads=1
  run_case llama_kv_heads_tensor_3 fail verify=verify_names_tensor_layouts -- "$EXE" check "$DECK" "${L[@]}" \
    --set model.heads=8 --set model.kv_heads=4 --set parallel.tensor=3
  run_case llama_odd_head_dim fail verify=verify_names_head_dim -- "$EXE" check "$DECK" "${L[@]}" \
    --set model.hidden=36 --set model.kv_heads=2
  run_case llama_rope_theta_zero fail verify=verify_names_rope_theta -- "$EXE" check "$DECK" "${L[@]}" \
    --set model.rope_theta=0
  run_case llama_norm_eps_negative fail verify=verify_names_norm_eps -- "$EXE" check "$DECK" "${L[@]}" \
    --set model.norm_eps=-1
  run_case llama_architecture_unknown fail verify=verify_names_architecture -- "$EXE" check "$DECK" \
    --set model.architecture=llama3
  run_case llama_gpt2_kv_heads fail verify=verify_names_kv_heads -- "$EXE" check "$DECK" --set model.kv_heads=2
  run_case llama_gpt2_rope_theta fail verify=verify_names_rope_theta -- "$EXE" check "$DECK" \
    --set model.rope_theta=500000
  run_case llama_gpt2_norm_eps fail verify=verify_names_norm_eps -- "$EXE" check "$DECK" --set model.norm_eps=1e-6
  run_case llama_gpt2_defaults_ok ok -- "$EXE" check "$DECK" --set model.rope_theta=10000 --set model.norm_eps=1e-5 \
    --set model.kv_heads=4 --set model.tie_embeddings=true
}

group_world() {
  run_case world_train_without_mpiexec fail -- "$EXE" train "$DECK" $(rundir world_1)
  run_case world_needs4_on_2 fail -- "${MPI[@]}" "$EXE" train "$SRC/tests/data/cli/needs4.toml" $(rundir world_4)
  run_case world_tensor1_on_2 fail -- "${TRAIN[@]}" --set parallel.tensor=1 $(rundir world_t1)
  run_case world_3_ranks fail -- "${MPI3[@]}" "$EXE" train "$DECK" $(rundir world_3)
  run_case world_heads_indivisible_train fail -- "${TRAIN[@]}" --set model.heads=3 $(rundir world_heads)
  if true; then
    run_case world_eval_1_rank fail needs=ck -- "${MPI1[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4"
  fi
}

group_paths() {
  mkdir -p "$FIX/data"
  cp "$FIX/corpus.txt" "$FIX/data/corpus" # what "corpus\u0000x.txt" would silently open
  cp "$FIX/corpus.txt" "$FIX/data/"$'new\nline.txt'
  ln -sf /dev/zero "$FIX/data/zero.txt"
  ln -sf /dev/urandom "$FIX/data/urandom.txt"
  ln -sf loop.txt "$FIX/data/loop.txt"
  local d
  d=$(deck_sed nul_name 's#^train = .*#train = "data/corpus\\u0000x.txt"#')
  cp -r "$FIX/data" "$FIX/decks/"
  run_case path_train_nul_in_name fail -- "${MPI[@]}" "$EXE" train "$d" $(rundir path_nul)
  local key what path expect
  while read -r key what path expect; do
    run_case "path_${key#data.}_$what" "$expect" -- "${TRAIN[@]}" --set "$key=$path" --set training.steps=2 $(rundir "path_${key}_$what")
  done <<EOF
data.train missing $FIX/no_such.txt fail
data.train directory $FIX/a_dir.txt fail
data.train devzero /dev/zero fail
data.train symlink_devzero $FIX/data/zero.txt fail
data.train symlink_urandom $FIX/data/urandom.txt fail
data.train symlink_loop $FIX/data/loop.txt fail
data.train fifo $FIX/fifo.txt fail
data.train long_path $LONGPATH fail
data.train long_component $FIX/$LONGNAME.txt fail
data.valid missing $FIX/no_such.txt fail
data.valid directory $FIX/a_dir.txt fail
data.valid fifo $FIX/fifo.txt fail
data.valid devzero /dev/zero fail
EOF
  run_case path_train_newline_missing fail -- "${TRAIN[@]}" --set data.train="$FIX/data/no"$'\n'"such.txt" $(rundir path_nl1)
  run_case path_train_newline_exists any -- "${TRAIN[@]}" --set data.train="$FIX/data/new"$'\n'"line.txt" --set training.steps=2 $(rundir path_nl2)
  # Output directories that cannot be created or written.
  while read -r key what path; do
    run_case "dir_${key%.dir}_$what" fail -- "${TRAIN[@]}" --set training.steps=2 \
      $([ "$key" = checkpoint.dir ] && rundir "dir_$what") --set "$key=$path"
  done <<EOF
checkpoint.dir under_file $FIX/regular_file/ck
checkpoint.dir is_file $FIX/regular_file
checkpoint.dir under_proc /proc/tptrain_ck
checkpoint.dir under_sys /sys/tptrain_ck
checkpoint.dir dev_null_x /dev/null/x
checkpoint.dir long_component $RUNS/$LONGNAME/ck
checkpoint.dir long_path ${LONGPATH%/x.txt}/ck
run.dir under_file $FIX/regular_file/run
run.dir is_file $FIX/regular_file
run.dir under_proc /proc/tptrain_run
run.dir dev_null /dev/null
run.dir dev_null_x /dev/null/x
run.dir long_component $RUNS/$LONGNAME
run.dir is_data_file $FIX/corpus.txt
EOF
  run_case dir_checkpoint_newline any -- "${TRAIN[@]}" --set training.steps=2 $(rundir dir_nl) \
    --set checkpoint.dir="$RUNS/dir_nl/c"$'\n'"k"
}

# ---- 2. data files --------------------------------------------------------------------------

group_data() {
  local D=$FIX/data
  mkdir -p "$D"
  : >"$D/empty.txt"
  printf 'x' >"$D/one_byte.txt"
  head -c 10 "$FIX/corpus.txt" >"$D/ten_bytes.txt"
  head -c 16 "$FIX/corpus.txt" >"$D/sixteen_bytes.txt"
  head -c 17 "$FIX/corpus.txt" >"$D/seventeen_bytes.txt"
  { cat "$FIX/corpus.txt"; printf '\xc8\xc9\xff'; } >"$D/high_bytes.txt"
  cp "$FIX/corpus.txt" "$D/corpus.TXT"
  cp "$FIX/corpus.txt" "$D/corpus.bin"
  cp "$FIX/corpus.txt" "$D/corpus.dat"
  local s f
  for s in $("$PY" "$FIXPY" shards); do "$PY" "$FIXPY" shard "$D/shard_$s.bin" "$s"; done
  cp "$D/shard_valid.bin" "$D/shard_as_text.txt"
  while read -r f expect extra; do
    run_case "data_train_${f//./_}" "$expect" -- "${TRAIN[@]}" --set data.train="$D/$f" --set training.steps=2 \
      ${extra:+--set "$extra"} $(rundir "data_$f")
  done <<'EOF'
empty.txt fail
one_byte.txt fail
ten_bytes.txt fail
sixteen_bytes.txt fail
seventeen_bytes.txt any
high_bytes.txt ok
corpus.TXT any
corpus.bin fail
corpus.dat fail
shard_as_text.txt any
shard_valid.bin ok
shard_odd_length.bin fail
shard_truncated.bin fail
shard_longer.bin fail
shard_count_zero.bin fail
shard_count_negative.bin fail
shard_count_int_max.bin fail
shard_bad_magic.bin fail
shard_version_2.bin fail
shard_token_ge_vocab.bin fail
shard_token_65535.bin fail
shard_short_header.bin fail
EOF
  run_case data_train_high_bytes_vocab128 fail -- "${TRAIN[@]}" --set data.train="$D/high_bytes.txt" \
    --set model.vocab_size=128 --set training.steps=2 $(rundir data_hb128)
  run_case data_valid_ten_bytes any -- "${TRAIN[@]}" --set data.valid="$D/ten_bytes.txt" --set training.steps=2 $(rundir data_v10)
  run_case data_valid_empty fail -- "${TRAIN[@]}" --set data.valid="$D/empty.txt" --set training.steps=2 $(rundir data_v0)
  if true; then
    for f in empty.txt ten_bytes.txt shard_token_ge_vocab.bin shard_odd_length.bin; do
      run_case "data_eval_${f%.*}" fail needs=ck -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" --data "$D/$f"
    done
    run_case data_eval_devzero fail needs=ck -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" --data /dev/zero
    run_case data_eval_fifo fail needs=ck -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" --data "$FIX/fifo.txt"
    run_case data_eval_directory fail needs=ck -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" --data "$FIX/a_dir.txt"
    run_case data_eval_windows_0 fail needs=ck -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" --windows 0
    run_case data_eval_windows_-1 fail needs=ck -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" --windows -1
    run_case data_eval_windows_huge any needs=ck -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" --windows 2147483647
    run_case data_eval_windows_overflow fail needs=ck -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" --windows 99999999999999999999
  fi
}

# ---- 3. checkpoints -------------------------------------------------------------------------

# The four consumers of a checkpoint file. ck_cases NAME FILE EXPECT_EVAL EXPECT_GEN EXPECT_INSPECT
# EXPECT_RESUME ('-' skips one; 'same' = success only with the pristine result).
ck_cases() {
  local name=$1 file=$2 ev=$3 gen=$4 ins=$5 res=$6
  local vf=""
  [ "$ev" = same ] && vf=verify=verify_eval_same
  [ "$ev" = - ] || run_case "${name}_eval" "$ev" needs=ck $vf -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$file"
  vf=""
  [ "$gen" = same ] && vf=verify=verify_gen_same
  [ "$gen" = - ] || run_case "${name}_generate" "$gen" needs=ck $vf -- "${MPI[@]}" "$EXE" generate "$DECK" --checkpoint "$file" \
    --prompt "$STREAM_PROMPT" --tokens 24 --temperature 0
  vf=""
  [ "$ins" = same ] && vf=verify=verify_inspect_same
  [ "$ins" = - ] || run_case "${name}_inspect" "$ins" needs=ck $vf -- "$EXE" inspect "$file"
  if [ "$res" != - ] && selected "${name}_resume" && ensure_ck; then
    local r=$RUNS/resume_$name
    rm -rf "$r"
    mkdir -p "$r/ck"
    if [ -e "$file" ] || [ -L "$file" ]; then cp -P "$file" "$r/ck/step_00000004.h5" 2>/dev/null || cp -r "$file" "$r/ck/step_00000004.h5"; fi
    vf=""
    [ "$res" = same ] && vf=verify=verify_resume_same
    [ "$res" = ok ] && vf=verify=verify_resumed
    run_case "${name}_resume" "$res" $vf -- "${TRAIN[@]}" --set run.dir="$r" --set checkpoint.dir="$r/ck" \
      --set checkpoint.resume=true --set training.steps=6 --set training.log_interval=1
  fi
}

group_ck_files() {
  local C=$FIX/ck
  mkdir -p "$C"
  cp "$FIX/corpus.txt" "$C/text.h5"
  : >"$C/empty.h5"
  ln -sf "$C/no_such.h5" "$C/dangling.h5"
  "$PY" "$FIXPY" foreign "$C/foreign.h5"
  ck_cases ck_missing "$C/no_such.h5" fail fail fail -
  ck_cases ck_text "$C/text.h5" fail fail fail fail
  ck_cases ck_empty "$C/empty.h5" fail fail fail fail
  ck_cases ck_dangling_symlink "$C/dangling.h5" fail - fail any
  ck_cases ck_directory "$FIX/a_dir.h5" fail - fail any
  ck_cases ck_fifo "$FIX/fifo.h5" fail - fail -
  ck_cases ck_devzero /dev/zero fail - fail -
  ck_cases ck_urandom /dev/urandom - - fail -
  ck_cases ck_foreign_hdf5 "$C/foreign.h5" fail fail fail fail
  ck_cases ck_deck_as_checkpoint "$DECK" fail - fail -
  local size=510512 len
  [ -f "$CK4" ] && size=$(stat -c %s "$CK4")
  for len in 8 512 2048 4096 100000 $((size / 2)) $((size - 1)); do
    any_selected "ck_truncated_${len}_eval" "ck_truncated_${len}_generate" "ck_truncated_${len}_inspect" \
      "ck_truncated_${len}_resume" || continue
    ensure_ck || return
    "$PY" "$FIXPY" truncate "$CK4" "$C/trunc_$len.h5" "$len"
    case $len in 4096 | $((size - 1))) ck_cases "ck_truncated_$len" "$C/trunc_$len.h5" fail fail fail fail ;;
    *) ck_cases "ck_truncated_$len" "$C/trunc_$len.h5" fail fail fail - ;;
    esac
  done
}

group_ck_flips() {
  # The case names hold the offsets, which depend on the checkpoint: with CASES, say "flip".
  [ "$CASES" = . ] || [[ $CASES == *flip* ]] || return 0
  ensure_ck || return
  local C=$FIX/flip i=0 off xor n_head=$((FLIPS * 3 / 8))
  mkdir -p "$C"
  while read -r off xor; do
    i=$((i + 1))
    local name
    name=$(printf 'flip_%02d_at_%d_xor_%d' "$i" "$off" "$xor")
    any_selected "${name}_eval" "${name}_inspect" "${name}_generate" "${name}_resume" || continue
    "$PY" "$FIXPY" flip "$CK4" "$C/$name.h5" "$off" "$xor"
    if [ $((i % 5)) -eq 0 ]; then
      ck_cases "$name" "$C/$name.h5" same same same same
    else
      ck_cases "$name" "$C/$name.h5" same - same -
    fi
  done < <("$PY" "$FIXPY" offsets "$SEED" "$n_head" "$FLIPS" "$CK4")
}

group_ck_h5() {
  local C=$FIX/h5 kind ev gen ins res
  mkdir -p "$C"
  # kind: expectations for eval, generate, inspect, resume
  while read -r kind ev gen ins res; do
    any_selected "h5_${kind}_eval" "h5_${kind}_generate" "h5_${kind}_inspect" "h5_${kind}_resume" || continue
    ensure_ck || return
    "$PY" "$FIXPY" mutate "$CK4" "$C/$kind.h5" "$kind" >/dev/null 2>"$C/$kind.log" ||
      { note "could not make h5_$kind: $(tail -1 "$C/$kind.log")"; continue; }
    ck_cases "h5_$kind" "$C/$kind.h5" "$ev" "$gen" "$ins" "$res"
  done <<'EOF'
rename_model fail fail any fail
delete_dataset fail fail any fail
delete_optimizer same - any fail
delete_train same - any fail
no_format_attr fail fail any fail
format_wrong fail - any fail
format_version_99 fail fail any fail
format_version_string fail - any fail
step_negative same - any fail
step_huge same - any fail
optimizer_step_mismatch same - any fail
train_attr_string same - any fail
tp_zero same - any same
deck_garbage same same any same
no_checksum fail fail fail fail
checksum_wrong_type fail - fail fail
nan_stale_checksum fail fail fail fail
nan_good_checksum fail fail any fail
inf_good_checksum fail fail any fail
optimizer_nan_good_checksum same - any fail
shape_word_255 fail fail any fail
shape_transposed fail - any fail
float64_bias same same any same
int32_weight fail - any fail
dataset_is_group fail fail any fail
scalar_dataset fail - any fail
external_link fail fail any fail
softlink_loop fail fail any fail
extra_dataset same - any same
chunked_gzip same same any same
EOF
}

group_ck_model() {
  local set
  for set in model.layers=4 model.layers=1 model.heads=2 model.hidden=64 model.ffn_hidden=64 \
    model.seq_length=32 model.vocab_size=512 model.vocab_size=128; do
    run_case "ck_other_model_eval_${set#model.}" fail needs=ck -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" --set "$set"
  done
  run_case ck_other_model_generate_heads=2 fail needs=ck -- "${MPI[@]}" "$EXE" generate "$DECK" --checkpoint "$CK4" --set model.heads=2 --prompt x
  run_case ck_other_model_eval_huge_hidden fail needs=ck -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" --set model.hidden=131072
  local r=$RUNS/resume_other
  if selected ck_other_model_resume_layers=4 && ensure_ck; then
    mkdir -p "$r/ck" && cp "$CK4" "$r/ck/"
    run_case ck_other_model_resume_layers=4 fail -- "${TRAIN[@]}" --set model.layers=4 --set checkpoint.resume=true \
      --set checkpoint.dir="$r/ck" --set run.dir="$r"
  fi
  run_case ck_other_model_eval_tensor1_on_1 ok needs=ck -- "${MPI1[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" --set parallel.tensor=1
}

group_ck_resume_dirs() {
  any_selected resume_ckdir_is_file resume_empty resume_only_tmp resume_newest_empty resume_newest_dir \
    resume_dangling resume_newest_truncated resume_odd_names resume_step_far resume_past_end || return 0
  ensure_ck || return
  local R=$RUNS/rd
  resume_in() { # NAME EXPECT VERIFY: resume with checkpoint.dir=$R/NAME/ck
    run_case "resume_$1" "$2" ${3:+verify=$3} -- "${TRAIN[@]}" --set run.dir="$R/$1" --set checkpoint.dir="$R/$1/ck" \
      --set checkpoint.resume=true --set training.steps=6 --set training.log_interval=1
  }
  mkdir -p "$R"/{empty,only_tmp,newest_empty,newest_dir,dangling,odd_names,step_far,newest_truncated}/ck
  run_case resume_ckdir_is_file fail -- "${TRAIN[@]}" $(rundir resume_file) --set checkpoint.dir="$FIX/regular_file" \
    --set checkpoint.resume=true
  resume_in empty ok verify_not_resumed
  head -c 200000 "$CK4" >"$R/only_tmp/ck/step_00000004.h5.tmp"
  resume_in only_tmp ok verify_not_resumed
  cp "$CK2" "$R/newest_empty/ck/" && : >"$R/newest_empty/ck/step_00000004.h5"
  resume_in newest_empty any
  cp "$CK2" "$R/newest_dir/ck/" && mkdir -p "$R/newest_dir/ck/step_00000004.h5"
  resume_in newest_dir any
  cp "$CK2" "$R/dangling/ck/" && ln -sf /nonexistent/x.h5 "$R/dangling/ck/step_00000004.h5"
  resume_in dangling any
  head -c 300000 "$CK4" >"$R/newest_truncated/ck/step_00000004.h5" && cp "$CK2" "$R/newest_truncated/ck/"
  resume_in newest_truncated any
  cp "$CK4" "$R/odd_names/ck/" && cp "$FIX/corpus.txt" "$R/odd_names/ck/step_abc.h5" &&
    cp "$FIX/corpus.txt" "$R/odd_names/ck/step_00000009.h5.bak" && cp "$FIX/corpus.txt" "$R/odd_names/ck/notes.txt"
  resume_in odd_names ok verify_resumed
  cp "$CK4" "$R/step_far/ck/step_99999999.h5"
  resume_in step_far any
  mkdir -p "$R/past_end/ck" && cp "$CK4" "$R/past_end/ck/"
  run_case resume_past_end any -- "${TRAIN[@]}" --set run.dir="$R/past_end" --set checkpoint.dir="$R/past_end/ck" \
    --set checkpoint.resume=true --set training.steps=2
}

# Every attribute the metadata checksum seals, changed alone to another valid value: each load
# (eval, resume) and inspect must refuse it as corrupt, never load another run's state.
group_ck_sealed() {
  [ "$CASES" = . ] || [[ $CASES == *sealed* ]] || return 0
  ensure_ck || return
  local C=$FIX/sealed attr name
  mkdir -p "$C"
  while read -r attr; do
    name=ck_sealed_${attr//\//_}
    any_selected "${name}_eval" "${name}_inspect" "${name}_resume" || continue
    "$PY" "$FIXPY" reseal "$CK4" "$C/$name.h5" "$attr" 2>"$C/$name.log" ||
      { note "could not make $name: $(tail -1 "$C/$name.log")"; continue; }
    ck_cases "$name" "$C/$name.h5" fail - fail fail
  done < <("$PY" "$FIXPY" sealed "$CK4")
}

# Defect 12 of issue 20: a resume under another layout is not bit for bit; its losses must stay
# within the tolerance docs/checkpoints.md states (1e-5 relative in fp32, 1e-4 in fp16) of the resume
# under the layout that wrote the checkpoint.
resume_close() { # LOG: the run's metrics.jsonl against $RESUME_REF within $RESUME_TOL
  grep -aq 'resuming from' "$1.out" || { echo "exit 0 without 'resuming from': started over"; return 1; }
  local run_dir
  run_dir=$(grep -ao 'run.dir=[^ ]*' "$1.cmd" | tail -1 | sed 's/^run.dir=//')
  awk -v tol="$RESUME_TOL" '
    { match($0, /"step": [0-9]+/); s = substr($0, RSTART + 8, RLENGTH - 8)
      match($0, /"loss": [^,]+/); l = substr($0, RSTART + 8, RLENGTH - 8) + 0 }
    FNR == NR { want[s] = l; next }
    s in want { n++; d = l - want[s]; if (d < 0) d = -d
                if (d > tol * want[s]) { printf "step %s: loss %.9g, same-layout resume %.9g (relative %.2g > %g)\n", s, l, want[s], d / want[s], tol; bad = 1 } }
    END { if (!n) { print "no step in common with the same-layout resume"; exit 1 } exit bad }' \
    "$RESUME_REF" "$run_dir/metrics.jsonl"
}
group_resume_layouts() {
  any_selected resume_layout_data2 resume_layout_one_rank resume_layout_fp16_fixture resume_layout_fp16_ref \
    resume_layout_fp16_one_rank || return 0
  ensure_ck || return
  local R=$RUNS/layouts
  [ -f "$RUNS/fixture_ref_resume/metrics.jsonl" ] || { note "no same-layout resume: resume_layout_ skipped"; return; }
  RESUME_REF=$RUNS/fixture_ref_resume/metrics.jsonl RESUME_TOL=1e-5
  layout_resume() { # NAME LAUNCHER... -- SETTINGS...: resume CK4 (fp32, tensor 2) under another layout
    local name=$1
    shift
    mkdir -p "$R/$name/ck" && cp "$CK4" "$R/$name/ck/"
    run_case "$name" ok verify=resume_close -- "$@" --set run.dir="$R/$name" --set checkpoint.dir="$R/$name/ck" \
      --set checkpoint.resume=true --set training.steps=6 --set training.log_interval=1
  }
  layout_resume resume_layout_data2 "${TRAIN[@]}" --set parallel.tensor=1 --set parallel.data=2
  layout_resume resume_layout_one_rank "${MPI1[@]}" "$EXE" train "$DECK" --set parallel.tensor=1
  # fp16: its own 4-step checkpoint, resumed under tensor 2 (reference) and on one rank.
  local f=$R/fp16 fp16=(--set training.precision=fp16 --set checkpoint.interval=4 --set training.log_interval=1)
  run_case resume_layout_fp16_fixture ok -- "${TRAIN[@]}" "${fp16[@]}" --set training.steps=4 --set run.dir="$f"
  fp16+=(--set training.steps=6)
  [ -f "$f/checkpoints/step_00000004.h5" ] || return 0
  mkdir -p "$R/fp16_ref/ck" "$R/fp16_one/ck"
  cp "$f/checkpoints/step_00000004.h5" "$R/fp16_ref/ck/" && cp "$f/checkpoints/step_00000004.h5" "$R/fp16_one/ck/"
  run_case resume_layout_fp16_ref ok verify=verify_resumed -- "${TRAIN[@]}" "${fp16[@]}" --set run.dir="$R/fp16_ref" \
    --set checkpoint.dir="$R/fp16_ref/ck" --set checkpoint.resume=true
  RESUME_REF=$R/fp16_ref/metrics.jsonl RESUME_TOL=1e-4
  [ -f "$RESUME_REF" ] &&
    run_case resume_layout_fp16_one_rank ok verify=resume_close -- "${MPI1[@]}" "$EXE" train "$DECK" "${fp16[@]}" \
      --set parallel.tensor=1 --set run.dir="$R/fp16_one" --set checkpoint.dir="$R/fp16_one/ck" --set checkpoint.resume=true
}

# parallel.order (docs/design.md, "Rank layout"): a value or type other than the two orders is
# refused naming the key; Megatron's order trains on 4 ranks (pipeline 2 x data 2, a layout whose
# rank map it changes), and its checkpoint resumes under the default order on the losses of a run
# that used the default order throughout.
group_order() {
  local d MPI4=("${MPI[@]}") i
  for i in "${!MPI4[@]}"; do [ "${MPI4[$i]}" = "-n" ] && MPI4[$((i + 1))]=4; done
  run_case order_bad_value fail -- "$EXE" check "$DECK" --set parallel.order=dp-pp-tp
  run_case order_upper_case fail -- "$EXE" check "$DECK" --set parallel.order=TP-DP-PP
  run_case order_empty fail -- "$EXE" check "$DECK" --set 'parallel.order=""'
  run_case order_plan_bad_value fail -- "$EXE" plan "$DECK" --set parallel.order=pp-tp-dp
  d=$(deck_sed order_int 's/^tensor = 2$/tensor = 2\norder = 3/') && run_case order_type_int fail -- "$EXE" check "$d"
  d=$(deck_sed order_bool 's/^tensor = 2$/tensor = 2\norder = true/') && run_case order_type_bool fail -- "$EXE" check "$d"
  d=$(deck_sed order_array 's/^tensor = 2$/tensor = 2\norder = ["tp", "dp", "pp"]/') &&
    run_case order_type_array fail -- "$EXE" check "$d"
  d=$(deck_sed order_twice 's/^tensor = 2$/tensor = 2\norder = "tp-dp-pp"\norder = "tp-pp-dp"/') &&
    run_case order_twice fail -- "$EXE" check "$d"
  run_case order_check_megatron ok -- "$EXE" check "$DECK" --set parallel.order=tp-dp-pp
  any_selected order_train_default order_resume_same_order order_train_megatron order_resume_default || return 0
  local R=$RUNS/order four=(--set parallel.tensor=1 --set parallel.pipeline=2 --set parallel.data=2
    --set training.log_interval=1 --set training.eval_interval=0 --set checkpoint.interval=2)
  # The reference: 2 steps and a resume to 4 (the schedule of a 2-step run, then of a 4-step one),
  # all in the default order.
  run_case order_train_default ok -- "${MPI4[@]}" "$EXE" train "$DECK" "${four[@]}" --set training.steps=2 \
    --set run.dir="$R/default"
  run_case order_resume_same_order ok verify=verify_resumed -- "${MPI4[@]}" "$EXE" train "$DECK" "${four[@]}" \
    --set training.steps=4 --set checkpoint.resume=true --set run.dir="$R/default"
  run_case order_train_megatron ok -- "${MPI4[@]}" "$EXE" train "$DECK" "${four[@]}" --set parallel.order=tp-dp-pp \
    --set training.steps=2 --set run.dir="$R/megatron"
  RESUME_REF=$R/default/metrics.jsonl RESUME_TOL=1e-5
  [ -f "$RESUME_REF" ] &&
    run_case order_resume_default ok verify=resume_close -- "${MPI4[@]}" "$EXE" train "$DECK" "${four[@]}" \
      --set training.steps=4 --set checkpoint.resume=true --set run.dir="$R/megatron"
}

# ---- 4. runs --------------------------------------------------------------------------------

# Steps per second of this machine now (a 300-step run), so that the runs below last long enough
# for their kills and a concurrent start, however fast the build and the machine are.
STEPS_PER_S=""
calibrate() {
  [ -n "$STEPS_PER_S" ] && return
  local save=$CASES
  CASES=.
  run_case run_calibrate ok -- "${TRAIN[@]}" --set run.dir="$RUNS/calibrate" --set training.steps=300 \
    --set training.log_interval=100 --set training.eval_interval=0 --set checkpoint.interval=100
  CASES=$save
  local s
  s=$(grep -aoE 'trained steps 1\.\.300 in [0-9.]+ s' "$LOG.out" | awk '{ print $NF == "s" ? $(NF-1) : $NF }')
  STEPS_PER_S=$(awk -v s="${s:-0}" 'BEGIN { v = s > 0 ? 300 / s : 100; printf "%d", v < 10 ? 10 : v }')
  echo "run_calibrate: $STEPS_PER_S steps/s" >>"$LOG.cmd"
}
# A run of STEPS steps into RUN_DIR -> LONG_CMD
long_run() { # RUN_DIR RESUME INTERVAL LOG_INTERVAL STEPS
  LONG_CMD=("${TRAIN[@]}" --set run.dir="$1" --set checkpoint.resume="$2" --set checkpoint.interval="$3"
    --set checkpoint.keep=2 --set training.steps="$5" --set training.log_interval="$4" --set training.eval_interval=0)
}
newest_step() { # CHECKPOINT_DIR -> step of the newest step_*.h5, or nothing
  local f
  f=$(cd "$1" 2>/dev/null && ls step_[0-9]*.h5 2>/dev/null | sort | tail -1)
  [ -n "$f" ] && echo $((10#$(echo "$f" | tr -dc 0-9)))
}
secs_since() { awk -v ms=$(($(now_ms) - $1)) 'BEGIN { printf "%.1f", ms / 1000 }'; }

# kill -9 of one rank / of mpiexec once a checkpoint exists; the job must end (no orphans), and a
# resume must continue from the newest checkpoint.
run_kill() { # WHAT: rank0 | rank1 | mpiexec
  local what=$1 name=run_kill_$1 d=$RUNS/kill_$1
  any_selected "$name" "${name}_resume" || return 0
  long_run "$d" true 10 1 100000000
  bg_start "$name" 120 "${LONG_CMD[@]}"
  if ! wait_for 90 eval "[ -n \"\$(newest_step '$d/checkpoints')\" ]"; then
    wait "$BG_PID"
    classify "$name" killed $? 0 "$BG_LOG" "" 120
    return
  fi
  local mp r0 r1 target t_kill
  mp=$(launcher_pid "$BG_PID") r0=$(rank_pid "$BG_PID" 0) r1=$(rank_pid "$BG_PID" 1)
  case $what in rank0) target=$r0 ;; rank1) target=$r1 ;; mpiexec) target=$mp ;; esac
  echo "pids: timeout $BG_PID mpiexec $mp rank0 $r0 rank1 $r1; kill -9 $what = $target" >>"$BG_LOG.cmd"
  t_kill=$(now_ms)
  [ -n "$target" ] && kill -9 "$target"
  local outcome msg
  if [ -z "$target" ]; then
    outcome="NO MESSAGE" msg="could not find the $what process to kill"
  elif alive "$BG_PID" && ! wait_for 60 dead "$BG_PID"; then
    outcome=HANG msg="job still running 60 s after kill -9 of $what"
  else
    wait "$BG_PID"
    local rc=$? orphans=""
    wait_for 30 eval "dead ${r0:-999999999} && dead ${r1:-999999999}" ||
      orphans=$(for p in $r0 $r1; do alive "$p" && echo "$p"; done | tr '\n' ' ')
    if [ -n "$orphans" ]; then
      outcome=HANG msg="ranks left running 30 s after kill -9 of $what: pids $orphans"
    elif [ "$rc" -eq 0 ]; then
      outcome="SILENT WRONG" msg="job exited 0 after kill -9 of $what"
    else
      outcome=ok msg="job ended (rc $rc) $(secs_since "$t_kill") s after kill -9 of $what: $(grep -a -m1 -E 'exited on signal|tptrain: error|noticed' "$BG_LOG.err")"
    fi
  fi
  for p in $r0 $r1 $mp $BG_PID; do alive "$p" && kill -9 "$p" 2>/dev/null; done
  echo "outcome: $outcome: $msg" >>"$BG_LOG.cmd"
  CASE_N=$BG_N
  record "$name" killed "$outcome" "$(secs_since "$BG_T0")" "$msg"
  sleep 1
  local step
  step=$(newest_step "$d/checkpoints")
  long_run "$d" true 10 1 $((${step:-0} + 20))
  run_case "${name}_resume" ok timeout=120 verify=verify_resumed -- "${LONG_CMD[@]}"
}

# --test-hook kill_in_checkpoint=<step>: the job is SIGKILLed while writing that step's
# checkpoint; the previous one must stay intact and the resumed loss curve must equal the
# uninterrupted one.
run_kill_in_checkpoint() {
  any_selected run_kill_in_ckpt_step4 run_kill_in_ckpt_step4_files run_kill_in_ckpt_step4_resume \
    run_kill_in_ckpt_step2 run_kill_in_ckpt_step2_resume || return 0
  local common=(--set checkpoint.interval=2 --set checkpoint.resume=true --set training.log_interval=1 --set training.steps=6)
  local d=$RUNS/kill_ck4 ref=$RUNS/kill_ck_ref
  local save=$CASES
  CASES=.
  run_case run_kill_in_ckpt_reference ok -- "${TRAIN[@]}" "${common[@]}" --set run.dir="$ref"
  CASES=$save
  run_case run_kill_in_ckpt_step4 killed -- "${TRAIN[@]}" "${common[@]}" --set run.dir="$d" --test-hook kill_in_checkpoint=4
  local files
  files=$(cd "$d/checkpoints" 2>/dev/null && ls | tr '\n' ' ')
  new_log run_kill_in_ckpt_step4_files
  if [ -f "$d/checkpoints/step_00000002.h5" ] && [ ! -e "$d/checkpoints/step_00000004.h5" ]; then
    record run_kill_in_ckpt_step4_files ok ok 0 "step 2 intact, no step 4: $files"
  else
    record run_kill_in_ckpt_step4_files ok "SILENT WRONG" 0 "expected step_00000002.h5 and no step_00000004.h5, found: $files"
  fi
  KILL_REF=$ref/metrics.jsonl
  run_case run_kill_in_ckpt_step4_resume ok verify=verify_curve -- "${TRAIN[@]}" "${common[@]}" --set run.dir="$d"
  local d2=$RUNS/kill_ck2
  run_case run_kill_in_ckpt_step2 killed -- "${TRAIN[@]}" "${common[@]}" --set run.dir="$d2" --test-hook kill_in_checkpoint=2
  run_case run_kill_in_ckpt_step2_resume ok verify=verify_curve -- "${TRAIN[@]}" "${common[@]}" --set run.dir="$d2"
}
curve() { grep -aoE '"step": [0-9]+, "loss": [^,]+' "$1" 2>/dev/null; }
verify_curve() {
  local run_dir
  run_dir=$(grep -ao 'run.dir=[^ ]*' "$1.cmd" | tail -1 | sed 's/^run.dir=//')
  [ "$(curve "$run_dir/metrics.jsonl")" = "$(curve "$KILL_REF")" ] && return 0
  echo "loss curve differs from the uninterrupted run: $(curve "$run_dir/metrics.jsonl" | tr '\n' ' ' | cut -c1-60)"
  return 1
}

# Two runs on one run.dir (or one checkpoint.dir): the second is refused; the first finishes
# with valid checkpoints. The first lasts ~20 s (from the calibration).
run_concurrent() {
  local what=$1 # run_dir | checkpoint_dir
  local name=run_concurrent_$what d=$RUNS/concurrent_$what
  any_selected "$name"_first "$name"_second "$name"_first_checkpoints || return 0
  calibrate
  local steps=$((STEPS_PER_S * 20))
  [ $steps -lt 200 ] && steps=200
  steps=$((steps / 4 * 4))
  long_run "$d" false $((steps / 4)) $((steps / 4)) $steps
  bg_start "${name}_first" 180 "${LONG_CMD[@]}"
  wait_for 60 test -s "$d/tptrain.lock" || note "$name: the first run never showed $d/tptrain.lock"
  if [ "$what" = run_dir ]; then
    run_case "${name}_second" fail -- "${TRAIN[@]}" --set run.dir="$d" --set training.steps=2 --set checkpoint.resume=false
  else
    run_case "${name}_second" fail -- "${TRAIN[@]}" --set run.dir="$d.second" --set checkpoint.dir="$d/checkpoints" \
      --set training.steps=4 --set checkpoint.interval=2 --set checkpoint.resume=false
  fi
  alive "$BG_PID" || note "$name: the first run ended before the second one ended (make it longer)"
  bg_finish ok
  local f bad=0 final
  final=$(printf 'step_%08d.h5' $steps)
  new_log "${name}_first_checkpoints"
  for f in "$d"/checkpoints/step_*.h5; do
    [ -e "$f" ] || continue
    "$EXE" inspect "$f" >>"$LOG.out" 2>>"$LOG.err" || bad=1
  done
  local files
  files=$(cd "$d/checkpoints" 2>/dev/null && ls | tr '\n' ' ')
  if [ "$bad" -eq 0 ] && [ -f "$d/checkpoints/$final" ]; then
    record "${name}_first_checkpoints" ok ok 0 "inspect ok on: $files"
  else
    record "${name}_first_checkpoints" ok "SILENT WRONG" 0 "the first run's checkpoints: inspect failed or $final missing: $files $(first_error "$LOG.err")"
  fi
}

# Checkpoints on a full disk (a tmpfs; needs root): step 2 written with room to spare, then the
# disk filled up (256 KiB left) and the run resumed: writing step 4 must fail cleanly and leave
# step 2 intact.
run_disk_full() {
  any_selected run_disk_full_second_ckpt run_disk_full_previous_intact run_disk_full_first_ckpt run_disk_full_run_dir || return 0
  local m=$MNT/small
  mkdir -p "$m"
  if ! mount -t tmpfs -o size=8m tmpfs "$m" 2>"$MNT/mount.err"; then
    note "disk-full cases skipped: mount -t tmpfs failed: $(head -1 "$MNT/mount.err")"
    return
  fi
  local common=(--set checkpoint.dir="$m/ck" --set checkpoint.interval=2 --set checkpoint.resume=true)
  local save=$CASES
  CASES=.
  run_case run_disk_full_setup ok -- "${TRAIN[@]}" $(rundir disk_full) "${common[@]}" --set training.steps=2
  CASES=$save
  dd if=/dev/zero of="$m/filler" bs=4k 2>/dev/null
  truncate -s -256K "$m/filler" # 256 KiB left: the start-up check passes, the checkpoint does not fit
  run_case run_disk_full_second_ckpt fail -- "${TRAIN[@]}" $(rundir disk_full) "${common[@]}" --set training.steps=4
  run_case run_disk_full_previous_intact ok -- "$EXE" inspect "$m/ck/step_00000002.h5"
  rm -f "$m/filler" "$m"/ck/*.tmp
  rm -f "$m/ck/step_00000002.h5"
  dd if=/dev/zero of="$m/filler" bs=4k count=$((8 * 256 - 64)) 2>/dev/null # 256 KiB left
  run_case run_disk_full_first_ckpt fail -- "${TRAIN[@]}" $(rundir disk_full1) --set checkpoint.dir="$m/ck" --set training.steps=2
  rm -f "$m/filler" "$m"/ck/*
  mkdir -p "$m/run"
  dd if=/dev/zero of="$m/filler" bs=4k 2>/dev/null
  run_case run_disk_full_run_dir fail -- "${TRAIN[@]}" --set run.dir="$m/run" --set checkpoint.dir="$RUNS/disk_full_rd/ck" \
    --set training.steps=4 --set training.log_interval=1
  umount "$m"
}

group_generate() {
  local G=("${MPI[@]}" "$EXE" generate "$DECK" --checkpoint "$CK4")
  run_case gen_tokens_0 fail needs=ck -- "${G[@]}" --prompt x --tokens 0
  run_case gen_tokens_-1 fail needs=ck -- "${G[@]}" --prompt x --tokens -1
  run_case gen_tokens_2147483648 fail needs=ck -- "${G[@]}" --prompt x --tokens 2147483648
  run_case gen_tokens_abc fail needs=ck -- "${G[@]}" --prompt x --tokens abc
  run_case gen_tokens_2147483647_streams stream needs=ck timeout=20 -- "${G[@]}" --prompt "$STREAM_PROMPT" --tokens 2147483647
  run_case gen_temperature_-1 fail needs=ck -- "${G[@]}" --prompt x --temperature -1
  run_case gen_temperature_nan fail needs=ck -- "${G[@]}" --prompt x --temperature nan
  run_case gen_temperature_inf any needs=ck -- "${G[@]}" --prompt x --temperature inf
  run_case gen_temperature_1e-45 any needs=ck -- "${G[@]}" --prompt x --temperature 1e-45
  run_case gen_temperature_1e300 any needs=ck -- "${G[@]}" --prompt x --temperature 1e300
  run_case gen_top_k_-5 fail needs=ck -- "${G[@]}" --prompt x --top-k -5
  run_case gen_top_k_1000000 any needs=ck -- "${G[@]}" --prompt x --top-k 1000000
  run_case gen_seed_-1 any needs=ck -- "${G[@]}" --prompt x --seed -1
  run_case gen_seed_2^70 fail needs=ck -- "${G[@]}" --prompt x --seed 1180591620717411303424
  run_case gen_prompt_empty any needs=ck -- "${G[@]}" --prompt ""
  run_case gen_prompt_100k_chars any needs=ck -- "${G[@]}" --prompt "$(head -c 100000 /dev/zero | tr '\0' 'a')" --tokens 4
  run_case gen_prompt_invalid_utf8 ok needs=ck -- "${G[@]}" --prompt $'\xff\xfe\x80 bytes' --tokens 4
  run_case gen_prompt_control_bytes ok needs=ck -- "${G[@]}" --prompt $'a\x01\x1b[2J\x7fb\n\n' --tokens 4
  # A model with a 128-byte vocabulary: prompt bytes >= 128 are not tokens of it.
  if selected gen_prompt_bytes_ge_vocab; then
    local r=$RUNS/fixture128
    local save=$CASES
    CASES=.
    run_case fixture_train_vocab128 ok -- "${TRAIN[@]}" --set run.dir="$r" --set model.vocab_size=128 --set training.steps=2
    CASES=$save
    run_case gen_prompt_bytes_ge_vocab fail -- "${MPI[@]}" "$EXE" generate "$DECK" --set model.vocab_size=128 \
      --checkpoint "$r/checkpoints/step_00000002.h5" --prompt $'caf\xc3\xa9 \xff' --tokens 4
  fi
}

# ---- 5. round 2: plan ranges and strict JSON (issue 20, defects 1, 2, 9, 10) ----------------

# Every line of the case's output that starts with '{' is strict JSON (tests/strict_json.py).
verify_json_strict() { "$PY" "$SRC/tests/strict_json.py" --lines "$1.out"; }
verify_json_null_gpu_memory() { "$PY" "$SRC/tests/strict_json.py" --lines --null gpu_memory_bytes "$1.out"; }
verify_json_null_days() { "$PY" "$SRC/tests/strict_json.py" --lines --null training_days "$1.out"; }
verify_json_null_grad_norm() { "$PY" "$SRC/tests/strict_json.py" --lines --null grad_norm "$1.out"; }
verify_json_progress() {
  grep -aq 'bench: warm-up step 1/5 took' "$1.out" || { echo "no progress line for the warm-up"; return 1; }
  verify_json_strict "$1"
}
group_round2_plan_json() {
  local P=("$EXE" plan "$DECK")
  # plan exits 1 for a deck that cannot run as written, with the reasons on stdout: a success here.
  local P1=(bash -c '"$@"; [ $? -eq 1 ]' plan_exits_1 "$EXE" plan "$DECK")
  run_case r2_plan_params_beyond_64_bits fail -- "${P[@]}" --set model.hidden=500000000 --set model.heads=2 \
    --set model.ffn_hidden=2 --set model.layers=64
  run_case r2_plan_bytes_beyond_64_bits fail -- "${P[@]}" --set model.hidden=715827882 --set model.heads=2 \
    --set model.ffn_hidden=2 --set model.layers=2
  run_case r2_plan_seq_length_beyond_64_bits fail -- "${P[@]}" --set model.seq_length=2147483646 \
    --set model.heads=2 --set model.hidden=1024 --set training.micro_batch=1 --set training.global_batch=1
  run_case r2_plan_gpu_memory_1e300 ok verify=verify_json_null_gpu_memory -- "${P[@]}" --gpu-memory 1e300
  run_case r2_plan_tokens_1e308_peak_1e-300 ok verify=verify_json_null_days -- "${P[@]}" --tokens 1e308 \
    --peak-tflops 1e-300
  run_case r2_plan_days_nan_suggestions ok verify=verify_json_strict -- "${P1[@]}" --gpus 4 --tokens 5e-324 \
    --peak-tflops 5e-324
  run_case r2_plan_layers_2000000 ok timeout=10 verify=verify_json_strict -- "${P[@]}" --set model.layers=2000000 \
    --gpu-memory 1000
  run_case r2_plan_layers_2000000_suggest ok timeout=10 verify=verify_json_strict -- "${P1[@]}" \
    --set model.layers=2000000 --gpus 8
  run_case r2_plan_gpus_per_node_2147483647 ok timeout=10 verify=verify_json_strict -- "${P1[@]}" --gpus 4 \
    --gpus-per-node 2147483647
  run_case r2_plan_gpus_2147483647 ok timeout=10 verify=verify_json_strict -- "${P1[@]}" --gpus 2147483647
  run_case r2_check_json ok verify=verify_json_strict -- "$EXE" check "$DECK" --json
  run_case r2_bench_warmup_100000 fail -- "${MPI[@]}" "$EXE" bench "$DECK" --warmup 100000
  run_case r2_bench_steps_2147483647 fail -- "${MPI[@]}" "$EXE" bench "$DECK" --steps 2147483647
  run_case r2_bench_warmup_progress ok verify=verify_json_progress -- "${MPI[@]}" "$EXE" bench "$DECK" --warmup 5 \
    --steps 1
  run_case r2_eval_json ok needs=ck verify=verify_json_strict -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4"
  # An fp16 run whose steps overflow (from the default scale 2^32 this model's gradients do, and
  # both steps are skipped): every metrics line is strict JSON, the overflowed grad_norm null. (A
  # loss that is not finite stops an fp16 run before its record: group_round2_fp16.)
  if selected r2_fp16_metrics_json; then
    local r=$RUNS/r2_fp16
    local save=$CASES
    CASES=.
    run_case r2_fp16_overflowing_run ok -- "${TRAIN[@]}" --set training.precision=fp16 --set run.dir="$r" \
      --set training.steps=2 --set training.log_interval=1
    CASES=$save
    run_case r2_fp16_metrics_json ok verify=verify_json_null_grad_norm -- cat "$r/metrics.jsonl"
  fi
}

# ---- round 2: metrics.jsonl and stop signals ---------------------------------------------------
# metrics.jsonl on a full disk and with damaged lines; stop signals from the first instruction of
# a rank, and to the launcher itself; the test main with Catch2's -o on 2 ranks.

# The run.dir of a case (its last --set run.dir=...).
run_dir_of() { grep -ao 'run.dir=[^ ]*' "$1.cmd" | tail -1 | sed 's/^run.dir=//'; }
# metrics.jsonl holds whole records of steps 1..training.steps, one per step, nothing else.
verify_metrics_complete() {
  local f steps why
  f=$(run_dir_of "$1")/metrics.jsonl
  steps=$(grep -ao 'training.steps=[0-9]*' "$1.cmd" | tail -1 | sed 's/.*=//')
  why=$(awk -v n="$steps" '
    !/^\{"step": [0-9]+, .*\}$/ { print "line " NR " is not a whole record: " substr($0, 1, 40); bad = 1; exit }
    { s = $2; sub(/,$/, "", s); if (s + 0 != NR) { print "line " NR " holds step " s; bad = 1; exit } }
    END { if (!bad && NR != n) print NR " records, expected " n }' "$f" 2>&1)
  [ -z "$why" ] && [ "$(tail -c1 "$f" | od -An -c | tr -d ' ')" = '\n' ] && return 0
  echo "$f: ${why:-the last line has no newline}"
  return 1
}

# classify_stop NAME RC MS LOG RUN_DIR WANT_STEP LAUNCHER_RC: a run that a stop signal was meant to
# end. ok: exit 3 (or LAUNCHER_RC, the status of a launcher that got the signal itself), the
# marker <RUN_DIR>/requeue names the step (WANT_STEP when given), and that checkpoint verifies.
classify_stop() {
  local name=$1 rc=$2 ms=$3 log=$4 dir=$5 want=$6 launcher_rc=${7:-3} secs outcome msg step ck
  secs=$(awk -v ms="$ms" 'BEGIN { printf "%.1f", ms / 1000 }')
  step=$(sed -n 's/^SIG[A-Z0-9]*: checkpoint of step \([0-9]*\) written.*/\1/p' "$dir/requeue" 2>/dev/null)
  ck=$(printf '%s/checkpoints/step_%08d.h5' "$dir" "${step:-0}")
  if { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ "$ms" -ge $((TIMEOUT * 1000)) ]; then
    outcome=HANG msg="did not stop within ${TIMEOUT}s: $(last_line "$log.out")"
  elif grep -aqE "$CRASH_RE" "$log.err" "$log.out" 2>/dev/null || [ "$rc" -ge 128 ]; then
    outcome=CRASH msg="rc $rc: $(grep -ahE -m1 "$CRASH_RE" "$log.err" "$log.out" | head -1)"
  elif [ -z "$step" ]; then
    outcome="SILENT WRONG" msg="rc $rc and no requeue marker in $dir: $(last_line "$log.out")"
  elif [ "$rc" -ne 3 ] && [ "$rc" -ne "$launcher_rc" ]; then
    outcome="UNEXPECTED ERROR" msg="rc $rc: $(first_error "$log.err")"
  elif [ -n "$want" ] && [ "$step" -ne "$want" ]; then
    outcome="SILENT WRONG" msg="stopped after step $step, not step $want"
  elif ! "$EXE" inspect "$ck" >"$log.inspect" 2>&1; then
    outcome="SILENT WRONG" msg="the checkpoint of step $step does not verify: $(first_error "$log.inspect")"
  else
    outcome=ok msg="rc $rc, stopped after step $step, checkpoint verifies: $(cat "$dir/requeue")"
  fi
  msg=${msg//$OUT/OUT}
  CASE_N=${log##*/}
  CASE_N=$((10#${CASE_N%%_*}))
  record "$name" stopped "$outcome" "$secs" "$msg"
}

# Both ranks of the test main wrote their report: report.txt and report.rank1.txt.
verify_test_reports() {
  local f
  for f in report.txt report.rank1.txt; do
    grep -q 'All tests passed' "$WORK/r2sm_test_main/$f" 2>/dev/null || { echo "no passing report in $f"; return 1; }
  done
}

group_round2_signals_metrics() {
  local stop=(--set training.log_interval=1 --set training.eval_interval=0 --set checkpoint.interval=0)
  local long=(--set training.steps=1000000)

  # 6. metrics.jsonl
  local M=$RUNS/r2sm_metrics
  if any_selected r2sm_metrics_cut_last_line r2sm_metrics_cut_record r2sm_metrics_step_beyond_int64 \
    r2sm_metrics_garbage_middle r2sm_metrics_out_of_order r2sm_metrics_fifo r2sm_metrics_dir; then
    local base=(--set training.log_interval=1 --set training.eval_interval=0 --set checkpoint.interval=2)
    metrics_fixture() { # NAME: a 4-step run in $M/NAME (checkpoints at 2 and 4)
      local save=$CASES
      CASES=.
      run_case "r2sm_metrics_fixture_$1" ok -- "${TRAIN[@]}" --set run.dir="$M/$1" "${base[@]}" --set training.steps=4
      CASES=$save
    }
    resume_metrics() { # NAME EXPECT [VERIFY]: resume $M/NAME to step 6
      run_case "r2sm_metrics_$1" "$2" ${3:+verify=$3} -- "${TRAIN[@]}" --set run.dir="$M/$1" "${base[@]}" \
        --set checkpoint.resume=true --set training.steps=6
    }
    names_line() { # NAME LINE: the refusal of the last case names metrics.jsonl:LINE, and the file is whole
      local err=$LOG.err
      new_log "r2sm_metrics_$1_names_line"
      if first_error "$err" | grep -q "metrics.jsonl:$2: "; then
        record "r2sm_metrics_$1_names_line" ok ok 0 "the error names metrics.jsonl:$2"
      else
        record "r2sm_metrics_$1_names_line" ok "NO MESSAGE" 0 "the error does not name metrics.jsonl:$2: $(first_error "$err")"
      fi
    }
    if selected r2sm_metrics_cut_last_line; then
      metrics_fixture cut_last_line && printf '{"step": ' >>"$M/cut_last_line/metrics.jsonl"
      resume_metrics cut_last_line ok verify_metrics_complete
    fi
    if selected r2sm_metrics_cut_record; then
      # Killed after its checkpoint of step 4 while logging step 5: half a record, no newline.
      metrics_fixture cut_record && printf '{"step": 5, "loss": 4.0' >>"$M/cut_record/metrics.jsonl"
      resume_metrics cut_record ok verify_metrics_complete
    fi
    if selected r2sm_metrics_step_beyond_int64; then
      metrics_fixture step_beyond_int64 &&
        echo '{"step": 99999999999999999999, "loss": 1.0}' >>"$M/step_beyond_int64/metrics.jsonl"
      resume_metrics step_beyond_int64 fail
      names_line step_beyond_int64 5
    fi
    if selected r2sm_metrics_garbage_middle; then
      metrics_fixture garbage_middle && sed -i '2s/.*/garbage/' "$M/garbage_middle/metrics.jsonl"
      resume_metrics garbage_middle fail
      names_line garbage_middle 2
    fi
    if selected r2sm_metrics_out_of_order; then
      metrics_fixture out_of_order && sed -i '3s/"step": 3,/"step": 1,/' "$M/out_of_order/metrics.jsonl"
      resume_metrics out_of_order fail
      names_line out_of_order 3
    fi
    if selected r2sm_metrics_fifo; then
      mkdir -p "$M/fifo" && mkfifo "$M/fifo/metrics.jsonl"
      run_case r2sm_metrics_fifo fail -- "${TRAIN[@]}" --set run.dir="$M/fifo" "${base[@]}" --set training.steps=2
    fi
    if selected r2sm_metrics_dir; then
      mkdir -p "$M/dir/metrics.jsonl"
      run_case r2sm_metrics_dir fail -- "${TRAIN[@]}" --set run.dir="$M/dir" "${base[@]}" --set training.steps=2
    fi
  fi

  # run.dir on a file system that fills up during the run (a tmpfs; needs root): the run stops
  # with the reason, the file keeps whole records, and once there is room the resumed run
  # completes the file.
  if any_selected r2sm_metrics_disk_full r2sm_metrics_disk_full_whole_lines r2sm_metrics_disk_full_resume; then
    local m=$MNT/r2sm
    mkdir -p "$m"
    if ! mount -t tmpfs -o size=1m tmpfs "$m" 2>"$MNT/r2sm_mount.err"; then
      note "r2sm_metrics_disk_full skipped: mount -t tmpfs failed: $(head -1 "$MNT/r2sm_mount.err")"
    else
      local ck=$RUNS/r2sm_disk_full_ck
      mkdir -p "$m/run"
      dd if=/dev/zero of="$m/filler" bs=4k count=$((256 - 3)) 2>/dev/null # 12 KiB left: ~20 records
      run_case r2sm_metrics_disk_full fail -- "${TRAIN[@]}" --set run.dir="$m/run" --set checkpoint.dir="$ck" \
        --set training.log_interval=1 --set training.eval_interval=0 --set checkpoint.interval=10 --set training.steps=60
      new_log r2sm_metrics_disk_full_whole_lines
      local why
      if ! grep -aq 'metrics.jsonl: No space left on device' "$CASEDIR/$(printf %03d $((N - 1)))_r2sm_metrics_disk_full.err"; then
        record r2sm_metrics_disk_full_whole_lines ok "SILENT WRONG" 0 "no 'metrics.jsonl: No space left on device' error"
      elif why=$(awk '!/^\{"step": [0-9]+, .*\}$/ { print "line " NR ": " substr($0, 1, 40); exit 1 }' "$m/run/metrics.jsonl"); then
        record r2sm_metrics_disk_full_whole_lines ok ok 0 "$(wc -l <"$m/run/metrics.jsonl") whole records, then the error"
      else
        record r2sm_metrics_disk_full_whole_lines ok "SILENT WRONG" 0 "a cut or broken line: $why"
      fi
      rm -f "$m/filler"
      run_case r2sm_metrics_disk_full_resume ok verify=verify_metrics_complete -- "${TRAIN[@]}" --set run.dir="$m/run" \
        --set checkpoint.dir="$ck" --set training.log_interval=1 --set training.eval_interval=0 \
        --set checkpoint.interval=10 --set training.steps=60 --set checkpoint.resume=true
      umount "$m"
    fi
  fi

  # 7. A stop signal at the first instruction of every rank (the test hook): exit 3 after step 1.
  local sig
  for sig in USR1 TERM; do
    local name=r2sm_signal_at_start_${sig,,}
    selected "$name" || continue
    local d=$RUNS/$name t0 rc
    wait_for_exe
    new_log "$name"
    printf 'TPTRAIN_TEST_STOP_SIGNAL_AT_START=SIG%s %s\n' "$sig" "${TRAIN[*]} --set run.dir=$d ${stop[*]} ${long[*]}" >"$LOG.cmd"
    t0=$(now_ms)
    (cd "$WORK" && ulimit -v "$VMEM_KB" && TPTRAIN_TEST_STOP_SIGNAL_AT_START=SIG$sig exec timeout -k 10 "$TIMEOUT" \
      "${TRAIN[@]}" --set run.dir="$d" "${stop[@]}" "${long[@]}") </dev/null >"$LOG.out" 2>"$LOG.err"
    rc=$?
    classify_stop "$name" "$rc" $(($(now_ms) - t0)) "$LOG" "$d" 1
  done

  # A real SIGUSR1 / SIGTERM to rank 0's process soon after it appears (before or during start-up).
  local ms
  for ms in 15 100; do
    for sig in USR1 TERM; do
      local name=r2sm_signal_rank0_${sig,,}_after_${ms}ms
      selected "$name" || continue
      local d=$RUNS/$name r0=""
      bg_start "$name" "$TIMEOUT" "${TRAIN[@]}" --set run.dir="$d" "${stop[@]}" "${long[@]}"
      wait_for 20 eval 'r0=$(rank_pid "$BG_PID" 0); [ -n "$r0" ]'
      sleep "$(awk -v ms="$ms" 'BEGIN { print ms / 1000 }')"
      [ -n "$r0" ] && kill -"$sig" "$r0"
      echo "kill -$sig rank 0 (pid ${r0:-none}) ${ms} ms after it appeared" >>"$BG_LOG.cmd"
      wait "$BG_PID"
      classify_stop "$name" $? $(($(now_ms) - BG_T0)) "$BG_LOG" "$d" ""
    done
  done

  # 8. SIGTERM, SIGINT, SIGHUP to mpiexec itself: it sends SIGTERM to the ranks
  # odls_base_sigkill_timeout seconds later (5 here, room for the checkpoint) and exits 1 of its
  # own; the ranks stop cleanly and the marker says so.
  for sig in TERM INT HUP; do
    local name=r2sm_launcher_sig${sig,,}
    selected "$name" || continue
    local d=$RUNS/$name mp
    OMPI_MCA_odls_base_sigkill_timeout=5 bg_start "$name" "$TIMEOUT" "${TRAIN[@]}" --set run.dir="$d" "${stop[@]}" "${long[@]}"
    wait_for 20 grep -qs '"step": 3,' "$d/metrics.jsonl"
    mp=$(launcher_pid "$BG_PID")
    [ -n "$mp" ] && kill -"$sig" "$mp"
    echo "kill -$sig mpiexec (pid ${mp:-none}) after step 3" >>"$BG_LOG.cmd"
    wait "$BG_PID"
    classify_stop "$name" $? $(($(now_ms) - BG_T0)) "$BG_LOG" "$d" "" 1
  done

  # The test main under mpiexec with Catch2's -o: one report per rank, no hang.
  if selected r2sm_test_main_out; then
    local tests=$BUILD/tests/tptrain_tests
    if [ -x "$tests" ]; then
      mkdir -p "$WORK/r2sm_test_main"
      run_case r2sm_test_main_out ok timeout=120 verify=verify_test_reports -- "${MPI[@]}" "$tests" \
        -o "$WORK/r2sm_test_main/report.txt" "[stop_signal]"
    else
      note "r2sm_test_main_out skipped: no $tests"
    fi
  fi
}

# ---- round 2: fp16 loss scaling, non-finite logits, errors without source locations --------

verify_clamped_to_min() {
  grep -aq "the checkpoint's loss scale 1 is below training.loss_scale_min: the run continues at 2" "$1.out" && return 0
  echo "exit 0 without raising the restored loss scale to training.loss_scale_min"
  return 1
}
verify_skipped_said() {
  grep -aq "no step of this run updated the weights" "$1.err" && return 0
  echo "exit 0, every step skipped, and no warning"
  return 1
}
group_round2_fp16() {
  local FP16=(--set training.precision=fp16)
  # Factors that made the scale Inf (1e308) or jump across fp16's range; a start above 2^64.
  run_case r2fp16_growth_1e308 fail -- "${TRAIN[@]}" $(rundir r2fp16_growth) "${FP16[@]}" \
    --set training.loss_scale_growth_factor=1e308 --set training.loss_scale_window=1
  run_case r2fp16_growth_1024.5 fail -- "$EXE" check "$DECK" --set training.loss_scale_growth_factor=1024.5
  run_case r2fp16_growth_1024 ok -- "$EXE" check "$DECK" --set training.loss_scale_growth_factor=1024
  run_case r2fp16_growth_nan fail -- "$EXE" check "$DECK" --set training.loss_scale_growth_factor=nan
  run_case r2fp16_backoff_1e-300 fail -- "$EXE" check "$DECK" --set training.loss_scale_backoff_factor=1e-300
  run_case r2fp16_backoff_2^-10 ok -- "$EXE" check "$DECK" --set training.loss_scale_backoff_factor=0.0009765625
  run_case r2fp16_initial_3.7e19 fail -- "$EXE" check "$DECK" --set training.loss_scale_initial=3.7e19
  run_case r2fp16_initial_2^64 ok -- "$EXE" check "$DECK" --set training.loss_scale_initial=18446744073709551616.0
  # The largest growth, every window: the scale stays finite (capped at 2^64) and the run ends.
  run_case r2fp16_growth_1024_window_1 any -- "${TRAIN[@]}" $(rundir r2fp16_g1024) "${FP16[@]}" \
    --set training.loss_scale_growth_factor=1024 --set training.loss_scale_window=1 --set training.steps=8
  # A fresh fp16 run of 2 steps that overflow from 2^32 on this model: it trains nothing and says so.
  run_case r2fp16_all_skipped ok verify=verify_skipped_said -- "${TRAIN[@]}" $(rundir r2fp16_skipped) "${FP16[@]}" \
    --set training.steps=2
  any_selected r2fp16_overflow_resume r2fp16_overflow_generate r2fp16_overflow_eval r2fp16_scale_nan \
    r2fp16_scale_inf r2fp16_scale_0 r2fp16_scale_-1 r2fp16_scale_1e300 r2fp16_scale_below_min || return 0
  ensure_ck || return
  local R=$RUNS/r2fp16
  mkdir -p "$R/overflow/ck"
  # The issue's reproducer: a finite checkpoint whose ln_f weight * 1e6 overflows fp16.
  $PY "$FIXPY" scale "$CK4" "$R/overflow/ck/step_00000004.h5" model/ln_f/weight 1e6
  run_case r2fp16_overflow_resume fail -- "${TRAIN[@]}" "${FP16[@]}" --set run.dir="$R/overflow" \
    --set checkpoint.dir="$R/overflow/ck" --set checkpoint.resume=true --set training.steps=6
  run_case r2fp16_overflow_generate fail -- "${MPI[@]}" "$EXE" generate "$DECK" "${FP16[@]}" \
    --checkpoint "$R/overflow/ck/step_00000004.h5" --prompt x --tokens 10
  run_case r2fp16_overflow_eval fail -- "${MPI[@]}" "$EXE" eval "$DECK" "${FP16[@]}" \
    --checkpoint "$R/overflow/ck/step_00000004.h5"
  # A saved loss scale no run writes (its metadata checksum valid): one agreed error naming the
  # file and the attribute, not an abort at a source location. 1e300 is finite: clamped to 2^64.
  local v
  for v in nan inf 0 -1 1e300; do
    mkdir -p "$R/scale_$v/ck"
    $PY "$FIXPY" loss_scale "$CK4" "$R/scale_$v/ck/step_00000004.h5" "$v"
    run_case "r2fp16_scale_$v" "$([ "$v" = 1e300 ] && echo any || echo fail)" -- "${TRAIN[@]}" "${FP16[@]}" \
      --set run.dir="$R/scale_$v" --set checkpoint.dir="$R/scale_$v/ck" --set checkpoint.resume=true \
      --set training.steps=6
  done
  mkdir -p "$R/below_min/ck"
  $PY "$FIXPY" loss_scale "$CK4" "$R/below_min/ck/step_00000004.h5" 1
  run_case r2fp16_scale_below_min ok verify=verify_clamped_to_min -- "${TRAIN[@]}" "${FP16[@]}" \
    --set run.dir="$R/below_min" --set checkpoint.dir="$R/below_min/ck" --set checkpoint.resume=true \
    --set training.steps=6 --set training.loss_scale_min=2 --set training.loss_scale_initial=2
}

# ---- 6. tokenize (issue 21, items 1-2) --------------------------------------------------------

verify_tok_shard() { # tok_text_ok's --out holds its shard, readable as training data, and nothing half-written
  [ -f "$WORK/tok_ok/train_000000.bin" ] || { echo "no train_000000.bin in $WORK/tok_ok"; return 1; }
  [ ! -e "$WORK/tok_ok/.tokenize-partial" ] || { echo "$WORK/tok_ok/.tokenize-partial left behind"; return 1; }
}
verify_tok_same() { # the 3-rank shards equal the 1-rank ones
  local f
  for f in "$WORK/tok_one"/*.bin; do
    cmp -s "$f" "$WORK/tok_three/$(basename "$f")" || { echo "$(basename "$f") differs between 1 and 3 ranks"; return 1; }
  done
  [ "$(ls "$WORK/tok_one" | wc -l)" = "$(ls "$WORK/tok_three" | wc -l)" ] || { echo "different shard lists"; return 1; }
}
verify_tok_nothing_left() { # a failed run leaves its --out folder without shards
  if compgen -G "$WORK/tok_fail/*" >/dev/null || [ -e "$WORK/tok_fail/.tokenize-partial" ]; then
    echo "left: $(ls -A "$WORK/tok_fail" | tr '\n' ' ')"
    return 1
  fi
}
group_tokenize() {
  local T=("$EXE" tokenize) d=$FIX/tok
  mkdir -p "$d/vocab_bad" "$d/vocab_merges" "$d/out_is_file"
  printf 'Plain text.\nSecond line.\n' >"$d/ok.txt"
  printf 'caf\xe9 au lait\n' >"$d/latin1.txt"
  printf 'ends inside a character \xe4\xb8' >"$d/truncated.txt"
  printf 'surrogate \xed\xa0\x80 here\n' >"$d/surrogate.txt"
  : >"$d/empty.txt"
  printf '\n   \n\r\n' >"$d/blank.jsonl"
  printf '{"text": "ok"}\n{"text": 42}\n' >"$d/text_number.jsonl"
  printf '{"id": 1}\n' >"$d/no_text.jsonl"
  printf '{"text": "unterminated\n' >"$d/unterminated.jsonl"
  printf '"just a string"\n' >"$d/not_object.jsonl"
  printf '{"text": "lone \\ud800 surrogate"}\n' >"$d/lone_surrogate.jsonl"
  printf 'nul\0inside\n' >"$d/nul.txt"
  head -c 3000000 /dev/zero | tr '\0' 'a' >"$d/one_word_3MB.txt"
  head -c 3000000 /dev/zero | tr '\0' ' ' >"$d/spaces_3MB.txt"
  printf 'garbage' >"$d/vocab_bad/encoder.json"
  printf '#version: 0.2\n' >"$d/vocab_bad/vocab.bpe"
  [ -f "$HOME/.cache/tptrain/gpt2/encoder.json" ] && cp "$HOME/.cache/tptrain/gpt2/encoder.json" "$d/vocab_merges/"
  printf '#version: 0.2\n\xc4\xa0 t\nnot-a-token x y\n' >"$d/vocab_merges/vocab.bpe"
  printf 'x' >"$d/out_is_file/file"
  [ -p "$d/fifo.txt" ] || mkfifo "$d/fifo.txt"
  run_case tok_text_ok ok verify=verify_tok_shard -- "${T[@]}" "$d/ok.txt" --out "$WORK/tok_ok"
  run_case tok_one_rank ok -- "${T[@]}" "$d/ok.txt" "$SRC/tests/data/text/docs.jsonl" "$SRC/tests/data/text/gpt2_corpus.txt" \
    --out "$WORK/tok_one" --shard-tokens 100 --valid-tokens 50
  run_case tok_three_ranks_same ok verify=verify_tok_same -- "${MPI3[@]}" "$EXE" tokenize "$d/ok.txt" \
    "$SRC/tests/data/text/docs.jsonl" "$SRC/tests/data/text/gpt2_corpus.txt" --out "$WORK/tok_three" --shard-tokens 100 \
    --valid-tokens 50 --segment-bytes 16
  run_case tok_overwrite_refused fail -- "${T[@]}" "$d/ok.txt" --out "$WORK/tok_ok"
  run_case tok_empty_file fail -- "${T[@]}" "$d/empty.txt" --out "$WORK/tok_x"
  run_case tok_missing_file fail -- "${T[@]}" "$d/none.txt" --out "$WORK/tok_x"
  run_case tok_directory_input fail -- "${T[@]}" "$d" --out "$WORK/tok_x"
  run_case tok_fifo_input fail -- "${T[@]}" "$d/fifo.txt" --out "$WORK/tok_x"
  run_case tok_dev_zero fail -- "${T[@]}" /dev/zero --out "$WORK/tok_x"
  run_case tok_latin1 fail -- "${T[@]}" "$d/latin1.txt" --out "$WORK/tok_x"
  run_case tok_truncated_utf8 fail -- "${T[@]}" "$d/truncated.txt" --out "$WORK/tok_x"
  run_case tok_surrogate_utf8 fail -- "${T[@]}" "$d/surrogate.txt" --out "$WORK/tok_x"
  run_case tok_latin1_2_ranks_nothing_left fail verify=verify_tok_nothing_left -- "${MPI[@]}" "$EXE" tokenize \
    "$SRC/tests/data/text/gpt2_corpus.txt" "$d/latin1.txt" --out "$WORK/tok_fail" --segment-bytes 64
  run_case tok_json_blank_only fail -- "${T[@]}" "$d/blank.jsonl" --out "$WORK/tok_x"
  run_case tok_json_text_number fail -- "${T[@]}" "$d/text_number.jsonl" --out "$WORK/tok_x"
  run_case tok_json_no_text fail -- "${T[@]}" "$d/no_text.jsonl" --out "$WORK/tok_x"
  run_case tok_json_unterminated fail -- "${T[@]}" "$d/unterminated.jsonl" --out "$WORK/tok_x"
  run_case tok_json_not_object fail -- "${T[@]}" "$d/not_object.jsonl" --out "$WORK/tok_x"
  run_case tok_json_lone_surrogate fail -- "${T[@]}" "$d/lone_surrogate.jsonl" --out "$WORK/tok_x"
  run_case tok_nul_bytes any -- "${T[@]}" "$d/nul.txt" --out "$WORK/tok_nul"
  run_case tok_one_word_3MB ok -- "${T[@]}" "$d/one_word_3MB.txt" --out "$WORK/tok_word"
  run_case tok_spaces_3MB ok -- "${T[@]}" "$d/spaces_3MB.txt" --out "$WORK/tok_spaces"
  run_case tok_same_file_twice ok -- "${T[@]}" "$d/ok.txt" "$d/ok.txt" --out "$WORK/tok_twice"
  run_case tok_out_is_file fail -- "${T[@]}" "$d/ok.txt" --out "$d/out_is_file/file"
  run_case tok_out_under_dev_null fail -- "${T[@]}" "$d/ok.txt" --out /dev/null/shards
  run_case tok_valid_takes_all fail -- "${T[@]}" "$d/ok.txt" --out "$WORK/tok_x" --valid-tokens 1000
  run_case tok_shard_tokens_0 fail -- "${T[@]}" "$d/ok.txt" --out "$WORK/tok_x" --shard-tokens 0
  run_case tok_shard_tokens_2^31 fail -- "${T[@]}" "$d/ok.txt" --out "$WORK/tok_x" --shard-tokens 2147483648
  run_case tok_valid_tokens_-1 fail -- "${T[@]}" "$d/ok.txt" --out "$WORK/tok_x" --valid-tokens -1
  run_case tok_segment_bytes_0 fail -- "${T[@]}" "$d/ok.txt" --out "$WORK/tok_x" --segment-bytes 0
  run_case tok_segment_bytes_2^40 fail -- "${T[@]}" "$d/ok.txt" --out "$WORK/tok_x" --segment-bytes 1099511627776
  run_case tok_tokenizer_gpt3 fail -- "${T[@]}" "$d/ok.txt" --out "$WORK/tok_x" --tokenizer gpt3
  run_case tok_tokenizer_dir_missing fail -- "${T[@]}" "$d/ok.txt" --out "$WORK/tok_x" --tokenizer-dir "$d/none"
  run_case tok_tokenizer_dir_bad_json fail -- "${T[@]}" "$d/ok.txt" --out "$WORK/tok_x" --tokenizer-dir "$d/vocab_bad"
  run_case tok_tokenizer_dir_bad_merges fail -- "${T[@]}" "$d/ok.txt" --out "$WORK/tok_x" --tokenizer-dir "$d/vocab_merges"
  run_case tok_no_inputs fail -- "${T[@]}" --out "$WORK/tok_x"
  run_case tok_no_out fail -- "${T[@]}" "$d/ok.txt"
}

# Hugging Face export and import (docs/checkpoints.md): damaged safetensors files and configs,
# variants that must import to the very same weights, and training.init_from.
verify_hf_export() {
  local d
  d=$(awk '{ for (i = 1; i < NF; i++) if ($i == "--out") print $(i + 1) }' "$1.cmd")
  [ -s "$d/model.safetensors" ] && [ -s "$d/config.json" ] && return 0
  echo "export exit 0 but $d lacks model.safetensors or config.json"
  return 1
}
verify_init_from() {
  grep -aq 'starting from the weights of' "$1.out" && return 0
  echo "exit 0 without 'starting from the weights of': training.init_from was not used"
  return 1
}
group_hf() {
  local names=(hf_export_ok hf_export_overwrite_refused hf_export_not_checkpoint hf_export_format_onnx hf_export_two_ranks
    hf_import_eval_same hf_import_two_ranks hf_import_out_exists hf_import_deck_mismatch hf_import_missing_dir
    hf_init_from_imported hf_init_from_missing hf_init_from_other_model)
  local fails=(truncated length_huge length_beyond_file not_json overlap dtype_i32 dtype_unknown duplicate renamed_layer
    shape_swapped nan empty safetensors_missing safetensors_directory lm_head_untied config_gelu_erf config_wider config_not_gpt2 config_missing config_garbage)
  local sames=(no_prefix mask_buffers lm_head_tied more_positions) k n any=""
  for n in "${names[@]}"; do selected "$n" && any=yes; done
  for k in "${fails[@]}" "${sames[@]}" bf16; do selected "hf_import_$k" && any=yes; done
  [ -n "$any" ] || return 0
  ensure_ck || return 0
  local d=$WORK/hf HF=$SRC/tests/hf
  mkdir -p "$d"
  [ -f "$d/base/model.safetensors" ] || "$EXE" export "$CK4" --format hf --out "$d/base" >"$d/base.log" 2>&1 ||
    { note "cannot export the fixture checkpoint (see $d/base.log): hf cases skipped"; return 0; }
  import_eval() { # DIR OUT: import, then eval the imported checkpoint as the pristine one is evaluated
    printf '%q import %q --deck %q --out %q && %s %q eval %q --checkpoint %q' "$EXE" "$1" "$DECK" "$2" \
      "$(printf '%q ' "${MPI[@]}")" "$EXE" "$DECK" "$2"
  }
  run_case hf_export_ok ok verify=verify_hf_export -- "$EXE" export "$CK4" --format hf --out "$d/ok"
  run_case hf_export_overwrite_refused fail -- "$EXE" export "$CK4" --format hf --out "$d/base"
  run_case hf_export_not_checkpoint fail -- "$EXE" export "$FIX/corpus.txt" --format hf --out "$d/x"
  run_case hf_export_format_onnx fail -- "$EXE" export "$CK4" --format onnx --out "$d/x"
  run_case hf_export_two_ranks ok verify=verify_hf_export -- "${MPI[@]}" "$EXE" export "$CK4" --format hf --out "$d/two"
  run_case hf_import_eval_same same verify=verify_eval_same -- bash -c "$(import_eval "$d/base" "$d/imported.h5")"
  run_case hf_import_two_ranks ok -- "${MPI[@]}" "$EXE" import "$d/base" --deck "$DECK" --out "$d/imported_two.h5"
  run_case hf_import_out_exists fail -- "$EXE" import "$d/base" --deck "$DECK" --out "$CK4"
  run_case hf_import_deck_mismatch fail -- "$EXE" import "$d/base" --deck "$DECK" --set model.hidden=64 --out "$d/x.h5"
  run_case hf_import_missing_dir fail -- "$EXE" import "$d/none" --deck "$DECK" --out "$d/x.h5"
  for k in "${fails[@]}"; do
    selected "hf_import_$k" || continue
    "$PY" "$HF/hostile_hf.py" "$d/base" "$d/$k" "$k" || { note "hostile_hf.py $k failed"; continue; }
    run_case "hf_import_$k" fail -- "$EXE" import "$d/$k" --deck "$DECK" --out "$d/$k.h5"
  done
  for k in "${sames[@]}"; do
    selected "hf_import_$k" || continue
    "$PY" "$HF/hostile_hf.py" "$d/base" "$d/$k" "$k" || { note "hostile_hf.py $k failed"; continue; }
    run_case "hf_import_$k" same verify=verify_eval_same -- bash -c "$(import_eval "$d/$k" "$d/$k.h5")"
  done
  if selected hf_import_bf16 && "$PY" "$HF/hostile_hf.py" "$d/base" "$d/bf16" bf16; then
    run_case hf_import_bf16 ok -- "$EXE" import "$d/bf16" --deck "$DECK" --out "$d/bf16.h5"
  fi
  [ -f "$d/imported.h5" ] || "$EXE" import "$d/base" --deck "$DECK" --out "$d/imported.h5" >/dev/null 2>&1
  run_case hf_init_from_imported ok verify=verify_init_from -- "${TRAIN[@]}" $(rundir hf_init) \
    --set training.init_from="$d/imported.h5" --set training.steps=1
  run_case hf_init_from_missing fail -- "${TRAIN[@]}" $(rundir hf_init_missing) --set training.init_from="$d/none.h5"
  run_case hf_init_from_other_model fail -- "${TRAIN[@]}" $(rundir hf_init_other) --set model.layers=4 \
    --set training.init_from="$d/imported.h5" --set training.steps=1
}

# ---- Hugging Face export and import of llama models (issue 23 item 5) ---------------------------

# A llama version of the fixture deck (grouped-query attention, untied), exported as
# LlamaForCausalLM; damaged or foreign variants are refused naming the tensor or the field,
# variants Hugging Face's own files have (no prefix, rotary buffers) import to the same model.
group_hf_llama() {
  local fails=(k_proj_missing k_proj_as_q lm_head_missing config_kv_heads config_rope_theta config_rope_scaling
    config_bias config_tied) sames=(no_prefix inv_freq) k any=""
  for k in export gpt2_deck deck_kv_heads "${fails[@]}" "${sames[@]}"; do selected "hf_llama_$k" && any=yes; done
  [ -n "$any" ] || return 0
  local d=$WORK/hf_llama HF=$SRC/tests/hf LL=(--set model.architecture=llama --set model.kv_heads=2)
  local ck=$RUNS/hf_llama_fixture/checkpoints/step_00000004.h5
  mkdir -p "$d"
  [ -f "$ck" ] || "${TRAIN[@]}" "${LL[@]}" --set run.dir="$RUNS/hf_llama_fixture" >"$d/train.log" 2>&1 ||
    { note "cannot train the llama fixture (see $d/train.log): hf_llama cases skipped"; return 0; }
  [ -f "$d/base/model.safetensors" ] || "$EXE" export "$ck" --format hf --out "$d/base" >"$d/base.log" 2>&1 ||
    { note "cannot export the llama fixture (see $d/base.log): hf_llama cases skipped"; return 0; }
  "${MPI[@]}" "$EXE" eval "$DECK" "${LL[@]}" --checkpoint "$ck" >"$d/eval.out" 2>&1
  verify_llama_eval_same() {
    local a b
    a=$(eval_loss_of "$1.out") b=$(eval_loss_of "$d/eval.out")
    [ -n "$a" ] && [ "$a" = "$b" ] && return 0
    echo "eval exit 0 with ${a:-no eval_loss}, the llama fixture gives ${b:-nothing}"
    return 1
  }
  local import_eval
  run_case hf_llama_export ok verify=verify_hf_export -- "$EXE" export "$ck" --format hf --out "$d/ok"
  run_case hf_llama_gpt2_deck fail -- "$EXE" import "$d/base" --deck "$DECK" --out "$d/gpt2.h5"
  run_case hf_llama_deck_kv_heads fail -- "$EXE" import "$d/base" --deck "$DECK" --set model.architecture=llama \
    --out "$d/kv.h5"
  for k in "${fails[@]}"; do
    selected "hf_llama_$k" || continue
    "$PY" "$HF/hostile_hf.py" "$d/base" "$d/$k" "llama_$k" || { note "hostile_hf.py llama_$k failed"; continue; }
    run_case "hf_llama_$k" fail -- "$EXE" import "$d/$k" --deck "$DECK" "${LL[@]}" --out "$d/$k.h5"
  done
  for k in "${sames[@]}"; do
    selected "hf_llama_$k" || continue
    "$PY" "$HF/hostile_hf.py" "$d/base" "$d/$k" "llama_$k" || { note "hostile_hf.py llama_$k failed"; continue; }
    import_eval=$(printf '%q import %q --deck %q %s --out %q && %s %q eval %q %s --checkpoint %q' "$EXE" "$d/$k" \
      "$DECK" "${LL[*]}" "$d/$k.h5" "$(printf '%q ' "${MPI[@]}")" "$EXE" "$DECK" "${LL[*]}" "$d/$k.h5")
    run_case "hf_llama_$k" same verify=verify_llama_eval_same -- bash -c "$import_eval"
  done
}

# ---- generation on GPT-2 BPE models (issue 21 item 4) -----------------------------------------

# A tiny GPT-2-vocabulary model (2 ranks, tensor 2) trained on the repository's README tokenized
# with gpt2; its greedy sample with --no-kv-cache is the reference the KV cache must print.
BPE_READY=""
BPE_DECK=$FIX/bpe/bpe.toml
BPE_CK=$FIX/bpe/ck/step_00000004.h5
ensure_bpe() {
  [ -n "$BPE_READY" ] && { [ "$BPE_READY" = yes ]; return; }
  BPE_READY=no
  mkdir -p "$FIX/bpe" "$REF"
  local save=$CASES
  CASES=.
  run_case fixture_bpe_tokenize ok -- "$EXE" tokenize "$SRC/README.md" --out "$FIX/bpe/shards" --tokenizer gpt2 \
    --valid-tokens 1024
  printf '[model]\nlayers = 2\nhidden = 32\nheads = 4\nseq_length = 16\nvocab_size = 50257\n[parallel]\ntensor = 2\n[training]\nglobal_batch = 2\nmicro_batch = 1\nsteps = 4\n[optimizer]\nwarmup_steps = 1\n[data]\ntrain = "shards/train_000000.bin"\nvalid = "shards/valid_000000.bin"\ntokenizer = "gpt2"\n[run]\ndir = "run"\n[checkpoint]\ndir = "ck"\nresume = false\n' >"$BPE_DECK"
  run_case fixture_bpe_train ok -- "${MPI[@]}" "$EXE" train "$BPE_DECK"
  if [ -f "$BPE_CK" ]; then
    ref_case fixture_bpe_ref_generate gen_bpe_full "${MPI[@]}" "$EXE" generate "$BPE_DECK" --checkpoint "$BPE_CK" \
      --prompt "$STREAM_PROMPT" --tokens 40 --temperature 0 --ignore-eos --no-kv-cache
    BPE_READY=yes
  else
    note "GPT-2 fixture training failed (no vocabulary?): gen_bpe cases skipped"
  fi
  CASES=$save
  [ "$BPE_READY" = yes ]
}
verify_gen_bpe_same() { # the KV cache prints the --no-kv-cache reference's text
  [ -n "$(generated_text "$1.out")" ] && [ "$(generated_text "$1.out")" = "$(generated_text "$REF/gen_bpe_full.out")" ] && return 0
  echo "the KV cache's text differs from the full forward's: $(generated_text "$1.out" | head -1)"
  return 1
}
verify_bits_per_byte() { grep -aq '"bits_per_byte": [0-9]' "$1.out" || { echo "no bits_per_byte in the JSON line"; return 1; }; }
group_gen_bpe() {
  any_selected gen_bpe_ || return 0
  ensure_bpe || return 0
  local G=("${MPI[@]}" "$EXE" generate "$BPE_DECK" --checkpoint "$BPE_CK")
  run_case gen_bpe_kv_cache_same ok verify=verify_gen_bpe_same -- "${G[@]}" --prompt "$STREAM_PROMPT" --tokens 40 \
    --temperature 0 --ignore-eos
  run_case gen_bpe_pipeline2_same ok verify=verify_gen_bpe_same -- "${G[@]}" --set parallel.tensor=1 \
    --set parallel.pipeline=2 --prompt "$STREAM_PROMPT" --tokens 40 --temperature 0 --ignore-eos
  run_case gen_bpe_sequence_parallel_same ok verify=verify_gen_bpe_same -- "${G[@]}" --set parallel.sequence_parallel=true \
    --prompt "$STREAM_PROMPT" --tokens 40 --temperature 0 --ignore-eos
  run_case gen_bpe_prompt_invalid_utf8 fail -- "${G[@]}" --prompt $'\xff\xfe\x80 bytes' --tokens 4
  run_case gen_bpe_prompt_truncated_utf8 fail -- "${G[@]}" --prompt $'ends inside \xe4\xb8' --tokens 4
  run_case gen_bpe_prompt_empty ok -- "${G[@]}" --prompt "" --tokens 8
  run_case gen_bpe_prompt_endoftext ok -- "${G[@]}" --prompt "<|endoftext|>" --tokens 8
  run_case gen_bpe_prompt_longer_than_context ok -- "${G[@]}" --prompt "$(head -c 2000 "$SRC/README.md")" --tokens 8
  run_case gen_bpe_sampled_top_k ok -- "${G[@]}" --prompt "$STREAM_PROMPT" --tokens 30 --temperature 0.9 --top-k 40 --seed 5
  run_case gen_bpe_no_vocab_files fail -- "${G[@]}" --set data.tokenizer_dir="$FIX/bpe/none" --prompt x --tokens 4
  run_case gen_bpe_vocab_files_empty_dir fail -- "${G[@]}" --set data.tokenizer_dir="$FIX/bpe" --prompt x --tokens 4
  run_case gen_bpe_model_vocab_1000 fail -- "${G[@]}" --set model.vocab_size=1000 --prompt x --tokens 4
  run_case gen_bpe_bytes_checkpoint fail needs=ck -- "${MPI[@]}" "$EXE" generate "$BPE_DECK" --checkpoint "$CK4" --prompt x
  run_case gen_bpe_checkpoint_of_bytes_deck fail -- "${MPI[@]}" "$EXE" generate "$DECK" --checkpoint "$BPE_CK" --prompt x
  run_case gen_bpe_eval_bits_per_byte ok verify=verify_bits_per_byte -- "${MPI[@]}" "$EXE" eval "$BPE_DECK" \
    --checkpoint "$BPE_CK" --windows 4
  # GPT-2 shards and model under the default data.tokenizer = "bytes": nats per token without bits
  # per byte, and bytes sampled only, each with a warning saying why
  run_case gen_bpe_eval_bytes_tokenizer ok -- "${MPI[@]}" "$EXE" eval "$BPE_DECK" --checkpoint "$BPE_CK" --windows 4 \
    --set data.tokenizer=bytes
  run_case gen_bpe_bytes_tokenizer ok -- "${G[@]}" --set data.tokenizer=bytes --prompt x --tokens 8
  run_case gen_bpe_eval_bytes_deck_on_bpe_data fail -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" \
    --data "$FIX/bpe/shards/valid_000000.bin" --windows 2
}

# ---- datasets of many shards ------------------------------------------------------------------

# shards_make DIR NAME COUNT [SIZE TOKENIZER [TOKEN [FILL_BYTES]]]: an llm.c shard of COUNT tokens
# (i*7+3) % 200, its header recording vocabulary SIZE of TOKENIZER id (0 0: none); TOKEN replaces
# token COUNT/2; FILL_BYTES > 0 writes the whole body as that token instead (a large shard).
shards_make() {
  "$PY" - "$@" <<'PYEOF'
import struct, sys
folder, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
size = int(sys.argv[4]) if len(sys.argv) > 4 else 0
tok = int(sys.argv[5]) if len(sys.argv) > 5 else 0
bad = int(sys.argv[6]) if len(sys.argv) > 6 else -1
fill = len(sys.argv) > 7 and int(sys.argv[7]) > 0
header = [0] * 256
header[0:5] = [20240520, 1, n, size, tok]
with open(f"{folder}/{name}", "wb") as f:
    f.write(struct.pack("<256i", *header))
    if fill:
        f.write(struct.pack("<H", bad) * n)
    else:
        tokens = [(i * 7 + 3) % 200 for i in range(n)]
        if bad >= 0:
            tokens[n // 2] = bad
        f.write(struct.pack(f"<{n}H", *tokens))
PYEOF
}

group_shards() {
  local S=$FIX/shards k
  rm -rf "$S"
  mkdir -p "$S/set" "$S/both" "$S/none" "$S/truncated" "$S/magic" "$S/mixed" "$S/gpt2" "$S/txt_bin" "$S/llmc_mix"     "$S/big_bad" "$S/glob_dir/train_000001.bin"
  for k in 0 1 2; do shards_make "$S/set" "train_00000$k.bin" 300 256 1; done
  cp "$S/set"/*.bin "$S/both/"
  shards_make "$S/both" valid_000000.bin 300 256 1
  printf 'notes\n' >"$S/none/README.md"
  cp "$S/set"/*.bin "$S/truncated/"
  truncate -s 1500 "$S/truncated/train_000001.bin"
  cp "$S/set"/*.bin "$S/magic/"
  printf '\x39\x30\x00\x00' | dd of="$S/magic/train_000002.bin" conv=notrunc status=none  # magic 12345
  cp "$S/set"/*.bin "$S/mixed/"
  shards_make "$S/mixed" train_000003.bin 300 50257 2
  shards_make "$S/gpt2" train_000000.bin 300 50257 2
  shards_make "$S/txt_bin" train_000000.bin 300 256 1
  cp "$FIX/corpus.txt" "$S/txt_bin/train_000001.txt"
  cp "$S/set"/*.bin "$S/llmc_mix/"
  shards_make "$S/llmc_mix" train_000003.bin 300  # llm.c's header: no vocabulary recorded
  shards_make "$S/glob_dir" train_000000.bin 300 256 1
  mkdir -p "$S/fifo" "$S/devzero"
  cp "$S/set"/*.bin "$S/fifo/"
  [ -p "$S/fifo/train_000003.bin" ] || mkfifo "$S/fifo/train_000003.bin"
  cp "$S/set"/*.bin "$S/devzero/"
  ln -sf /dev/zero "$S/devzero/train_000003.bin"
  # Over 64 MiB: tokens are checked where read (every one is 300 >= vocab_size 256).
  if selected shards_token_ge_vocab_large || selected shards_valid_token_ge_vocab_large; then
    shards_make "$S/big_bad" train_000000.bin 40000000 0 0 300 1
  fi
  local T=("${TRAIN[@]}" --set training.steps=2)
  run_case shards_glob ok -- "${T[@]}" --set data.train="$S/set/train_*.bin" $(rundir shards_glob)
  run_case shards_folder ok -- "${T[@]}" --set data.train="$S/set" $(rundir shards_folder)
  # Validation files that are training files too (issue 30): refused, naming them.
  run_case shards_valid_in_train fail -- "${T[@]}" --set data.train="$S/set" --set data.valid="$S/set/train_00000[12].bin" \
    $(rundir shards_valid_in_train)
  run_case shards_llmc_and_recorded ok -- "${T[@]}" --set data.train="$S/llmc_mix" $(rundir shards_llmc)
  run_case shards_bad_glob fail -- "${T[@]}" --set data.train="$S/set/trian_*.bin" $(rundir shards_bad_glob)
  run_case shards_bad_glob_valid fail -- "${T[@]}" --set data.valid="$S/nowhere/*.bin" $(rundir shards_bad_glob_v)
  run_case shards_folder_no_shards fail -- "${T[@]}" --set data.train="$S/none" $(rundir shards_none)
  run_case shards_folder_train_and_valid fail -- "${T[@]}" --set data.train="$S/both" $(rundir shards_both)
  run_case shards_truncated_in_set fail -- "${T[@]}" --set data.train="$S/truncated" $(rundir shards_trunc)
  run_case shards_bad_magic_in_set fail -- "${T[@]}" --set data.train="$S/magic/*.bin" $(rundir shards_magic)
  run_case shards_mixed_vocab fail -- "${T[@]}" --set data.train="$S/mixed" $(rundir shards_mixed)
  run_case shards_vocab_above_model fail -- "${T[@]}" --set data.train="$S/gpt2" $(rundir shards_gpt2)
  run_case shards_txt_and_bin fail -- "${T[@]}" --set data.train="$S/txt_bin" $(rundir shards_txt_bin)
  run_case shards_fifo_in_folder fail -- "${T[@]}" --set data.train="$S/fifo" $(rundir shards_fifo)
  run_case shards_devzero_in_pattern fail -- "${T[@]}" --set data.train="$S/devzero/*.bin" $(rundir shards_devzero)
  run_case shards_glob_matches_folder fail -- "${T[@]}" --set data.train="$S/glob_dir/train_*" $(rundir shards_globdir)
  run_case shards_token_ge_vocab_large fail -- "${T[@]}" --set data.train="$S/big_bad" $(rundir shards_big_bad)
  run_case shards_valid_token_ge_vocab_large fail -- "${T[@]}" --set data.valid="$S/big_bad/*.bin" $(rundir shards_big_bad_v)
  run_case shards_eval_glob ok needs=ck -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" --data "$S/set/train_*.bin"
  run_case shards_eval_bad_glob fail needs=ck -- "${MPI[@]}" "$EXE" eval "$DECK" --checkpoint "$CK4" --data "$S/set/x_*.bin"
  rm -rf "$S/big_bad"
}

# parallel.virtual_stages (interleaved 1F1B): each bad deck names the key and the rule; a good
# one trains, and plan shows the smaller bubble.
group_vpp() {
  local P2=(--set parallel.tensor=1 --set parallel.pipeline=2)
  run_case vpp_pipeline_1 fail -- "${TRAIN[@]}" --set parallel.virtual_stages=2 $(rundir vpp_p1)
  run_case vpp_layers_indivisible fail -- "${TRAIN[@]}" "${P2[@]}" --set parallel.virtual_stages=2 $(rundir vpp_layers)
  run_case vpp_micro_batches_not_multiple fail -- "${TRAIN[@]}" "${P2[@]}" --set model.layers=4 \
    --set parallel.virtual_stages=2 --set training.global_batch=6 $(rundir vpp_mb)
  run_case vpp_zero fail -- "${TRAIN[@]}" "${P2[@]}" --set parallel.virtual_stages=0 $(rundir vpp_0)
  run_case vpp_negative fail -- "${TRAIN[@]}" "${P2[@]}" --set parallel.virtual_stages=-2 $(rundir vpp_neg)
  run_case vpp_huge fail -- "${TRAIN[@]}" "${P2[@]}" --set parallel.virtual_stages=2147483647 $(rundir vpp_huge)
  run_case vpp_beyond_int fail -- "${TRAIN[@]}" "${P2[@]}" --set parallel.virtual_stages=4294967298 $(rundir vpp_big)
  run_case vpp_string fail -- "${TRAIN[@]}" "${P2[@]}" --set 'parallel.virtual_stages="2"' $(rundir vpp_str)
  run_case vpp_float fail -- "${TRAIN[@]}" "${P2[@]}" --set parallel.virtual_stages=2.0 $(rundir vpp_float)
  run_case vpp_train_ok ok -- "${TRAIN[@]}" "${P2[@]}" --set model.layers=4 --set parallel.virtual_stages=2 \
    $(rundir vpp_ok)
  run_case vpp_plan_175b ok -- "$EXE" plan "$SRC/input/gpt3-175b.toml" --set parallel.virtual_stages=2
  run_case vpp_plan_layers fail -- "$EXE" plan "$SRC/input/gpt3-175b.toml" --set parallel.virtual_stages=5
}

# bench --attention: only the three path names (issue 22's launch counting picks the device path).
group_bench_attention() {
  run_case bench_attention_bogus fail -- "${MPI[@]}" "$EXE" bench "$DECK" --attention flash --steps 1 --warmup 0
  run_case bench_attention_empty fail -- "${MPI[@]}" "$EXE" bench "$DECK" --attention '' --steps 1 --warmup 0
  run_case bench_attention_case fail -- "${MPI[@]}" "$EXE" bench "$DECK" --attention BATCHED --steps 1 --warmup 0
  run_case bench_attention_batched ok -- "${MPI[@]}" "$EXE" bench "$DECK" --attention batched --steps 1 --warmup 0
}

# ---- run the groups -------------------------------------------------------------------------

T_START=$(date +%s)
group_cli
group_deck_files
group_deck_syntax
group_deck_keys
group_numbers
group_set_syntax
group_world
group_paths
group_data
group_ck_files
group_ck_flips
group_ck_h5
group_ck_model
group_ck_resume_dirs
group_ck_sealed
group_resume_layouts
group_generate
group_gen_bpe
group_round2_plan_json
group_round2_fp16
group_tokenize
group_order
group_hf
group_hf_llama
group_shards
group_vpp
group_bench_attention
group_llama
run_kill rank1
run_kill rank0
run_kill mpiexec
run_kill_in_checkpoint
run_concurrent run_dir
run_concurrent checkpoint_dir
run_disk_full
group_round2_signals_metrics

# ---- summary --------------------------------------------------------------------------------

{
  echo
  echo "tptrain: $("$EXE" --version 2>&1 | head -1) ($EXE, built $(date -r "$EXE" '+%F %T'))"
  echo "cases: $N in $(($(date +%s) - T_START)) s; logs in $CASEDIR"
  echo
  echo "| outcome | count |"
  echo "|---|---:|"
  for k in ok "clean error" "SILENT WRONG" "UNEXPECTED ERROR" "NO MESSAGE" HANG CRASH; do
    echo "| $k | ${COUNT[$k]:-0} |"
  done
  [ -f "$OUT/table.md.notes" ] && { echo; sed 's/^<!-- note: \(.*\) -->$/note: \1/' "$OUT/table.md.notes"; rm -f "$OUT/table.md.notes"; }
} | tee -a "$OUT/table.md"
bad=0
for k in "SILENT WRONG" "UNEXPECTED ERROR" "NO MESSAGE" HANG CRASH; do bad=$((bad + ${COUNT[$k]:-0})); done
exit $((bad > 0 ? 1 : 0))
