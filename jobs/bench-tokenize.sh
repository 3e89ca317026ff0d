#!/usr/bin/env bash
# Tokenizer throughput, a benchmark (not a test): `tptrain tokenize` on the plain-text files of
# the Debian package `fortunes` (about 2.6 MB of English, each file one document), side by side
# with tiktoken's own core (npm @dqbd/tiktoken, the Rust crate as WebAssembly; pinned by
# tests/text/js-tiktoken/package-lock.json) on the same files.
#
#   jobs/bench-tokenize.sh [RANKS]      default 1 (RANKS > 1: under mpiexec)
#
# For each encoding (gpt2, cl100k_base, o200k_base) prints tptrain's summary line and tiktoken's
# figures, then a table: MB per CPU second (the rate of one core whatever else the machine is
# running) of each and their ratio, and whether the tokens counted agree. Environment:
# REPEAT=N (default 1) passes the files N times, so that words repeat as in a large corpus (the
# cache of merged pieces); TOKENIZER=NAME measures that one tokenizer alone (bytes, gpt2,
# cl100k_base, o200k_base; bytes has no tiktoken counterpart); TPTRAIN_BUILD_DIR (default
# <repo>/build) or TPTRAIN_BIN; TPTRAIN_FORTUNES_DIR (default /usr/share/games/fortunes).
# Without node and npm only tptrain's figures are printed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=jobs/env.sh
. "$root/jobs/env.sh"
exe=${TPTRAIN_BIN:-${TPTRAIN_BUILD_DIR:-$root/build}/tptrain}
ranks=${1:-1}
src=${TPTRAIN_FORTUNES_DIR:-/usr/share/games/fortunes}
[ -x "$exe" ] || { echo "bench-tokenize: $exe not found: build first (jobs/build.sh)" >&2; exit 1; }
# The text files: every <name>.dat index with its <name> beside it (not the .dat, not the .u8 links).
files=()
while IFS= read -r dat; do
  [ -f "${dat%.dat}" ] && [ ! -L "${dat%.dat}" ] && files+=("${dat%.dat}")
done < <(find "$src" -maxdepth 1 -name '*.dat' -type f | LC_ALL=C sort)
[ ${#files[@]} -gt 0 ] || { echo "bench-tokenize: no fortune files in $src (Debian package: fortunes)" >&2; exit 1; }
inputs=()
for _ in $(seq "${REPEAT:-1}"); do inputs+=("${files[@]}"); done
out=$(mktemp -d "${TMPDIR:-/tmp}/tptrain-bench-tokenize.XXXXXX")
trap 'rm -rf "$out"' EXIT
launch=()
[ "$ranks" -gt 1 ] && launch=(mpiexec -n "$ranks")
modules=
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  modules=$("$root/tests/text/setup-js-tiktoken.sh") || modules=
fi
[ -n "$modules" ] || echo "bench-tokenize: node/npm or @dqbd/tiktoken not available: tptrain's figures only" >&2
table=()
for tokenizer in ${TOKENIZER:-gpt2 cl100k_base o200k_base}; do
  summary=$("${launch[@]}" "$exe" tokenize "${inputs[@]}" --out "$out/$tokenizer" --tokenizer "$tokenizer" 2>&1 | tee /dev/stderr |
            grep '^tokenize: .* documents from')
  ours=$(sed -E 's/.*, ([0-9.]+) MB per CPU second.*/\1/' <<<"$summary")
  our_tokens=$(sed -E 's/.* -> ([0-9]+) .*/\1/' <<<"$summary")
  if [ -n "$modules" ] && [ "$tokenizer" != bytes ]; then
    theirs=$(node "$root/jobs/bench_tiktoken.cjs" "$modules" "$tokenizer" "${inputs[@]}")
    echo "tiktoken: $theirs" >&2
    table+=("$(/usr/bin/env python3 - "$tokenizer" "$ours" "$our_tokens" "$theirs" <<'PY'
import json, sys
name, ours, our_tokens, theirs = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
same = "yes" if our_tokens == theirs["tokens"] else f"NO ({our_tokens} vs {theirs['tokens']})"
print(f"{name:<12} {ours:>10.2f} {theirs['mb_per_cpu_s']:>10.2f} {ours / theirs['mb_per_cpu_s']:>7.2f}x   {same}")
PY
)")
  fi
  rm -rf "${out:?}/$tokenizer"
done
if [ ${#table[@]} -gt 0 ]; then
  echo
  echo "MB per CPU second on $(cat "${inputs[@]}" | wc -c) bytes (REPEAT=${REPEAT:-1}, $ranks rank(s))"
  printf '%-12s %10s %10s %8s   %s\n' encoding tptrain tiktoken ratio "same token count"
  printf '%s\n' "${table[@]}"
fi
