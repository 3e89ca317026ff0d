#!/usr/bin/env bash
# Tokenizer throughput, a benchmark (not a test): `tptrain tokenize` on the plain-text files of
# the Debian package `fortunes` (about 2.6 MB of English, each file one document).
#
#   jobs/bench-tokenize.sh [RANKS]      default 1 (RANKS > 1: under mpiexec)
#
# Prints tptrain's summary line: MB/s of the run, and MB per CPU second, the rate of one core
# whatever else the machine is running. Environment: REPEAT=N (default 1) passes the files N
# times, so that words repeat as in a large corpus (the cache of merged pieces);
# TOKENIZER=gpt2|bytes (default gpt2); TPTRAIN_BUILD_DIR (default <repo>/build) or TPTRAIN_BIN;
# TPTRAIN_FORTUNES_DIR (default /usr/share/games/fortunes).
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
"${launch[@]}" "$exe" tokenize "${inputs[@]}" --out "$out/shards" --tokenizer "${TOKENIZER:-gpt2}"
