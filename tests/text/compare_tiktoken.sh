#!/usr/bin/env bash
# tptrain's GPT-2 tokenizer against js-tiktoken, an independent implementation, token for token:
#
#   tests/text/compare_tiktoken.sh TPTRAIN_TESTS TPTRAIN CORPUS WORK_DIR
#
# 1. js-tiktoken (pinned, tests/text/setup-js-tiktoken.sh) encodes the corpus, its lines, edge
#    cases and random strings (tests/text/tiktoken_reference.cjs);
# 2. the hidden Catch2 case [tiktoken] encodes the same texts with text::Gpt2Tokenizer and
#    requires the same tokens, and decode to give the text back;
# 3. `tptrain tokenize CORPUS` writes a shard, which must hold <|endoftext|> and js-tiktoken's
#    tokens of the corpus.
# Exit 77 (the test is skipped, with the reason printed) when node or npm is not installed.
set -euo pipefail
[ $# -eq 4 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
tests=$1 exe=$2 corpus=$3 work=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for tool in node npm; do
  if ! command -v $tool >/dev/null 2>&1; then
    echo "SKIPPED: $tool not found; the comparison with js-tiktoken needs Node.js and npm (Debian: npm)"
    exit 77
  fi
done
modules=$("$here/setup-js-tiktoken.sh")
rm -rf "$work" && mkdir -p "$work"
node "$here/tiktoken_reference.cjs" "$modules" "$corpus" >"$work/reference.jsonl"
echo "js-tiktoken: $(wc -l <"$work/reference.jsonl") cases"
TPTRAIN_TIKTOKEN_REFERENCE=$work/reference.jsonl "$tests" "[tiktoken]"
"$exe" tokenize "$corpus" --out "$work/shards"
node "$here/tiktoken_reference.cjs" "$modules" "$corpus" "$work/shards/train_000000.bin"
