#!/usr/bin/env bash
# tptrain's tokenizer of ENCODING against tiktoken's own core (@dqbd/tiktoken, the Rust crate as
# WebAssembly), token for token:
#
#   tests/text/compare_tiktoken.sh TPTRAIN_TESTS TPTRAIN ENCODING CORPUS WORK_DIR
#
# ENCODING: gpt2, cl100k_base or o200k_base.
# 1. @dqbd/tiktoken (pinned, tests/text/setup-js-tiktoken.sh) encodes the corpus, its lines, edge
#    cases and random strings (tests/text/tiktoken_reference.cjs);
# 2. the hidden Catch2 case [tiktoken] encodes the same texts with make_tokenizer(ENCODING) and
#    requires the same tokens, and decode to give the text back;
# 3. `tptrain tokenize CORPUS --tokenizer ENCODING` writes a shard, which must hold the
#    end-of-text token and tiktoken's tokens of the corpus (uint32 above 65,536 ids).
# Exit 77 (the test is skipped, with the reason printed) when node or npm is not installed.
set -euo pipefail
[ $# -eq 5 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
tests=$1 exe=$2 encoding=$3 corpus=$4 work=$5
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for tool in node npm; do
  if ! command -v $tool >/dev/null 2>&1; then
    echo "SKIPPED: $tool not found; the comparison with tiktoken needs Node.js and npm (Debian: npm)"
    exit 77
  fi
done
modules=$("$here/setup-js-tiktoken.sh")
rm -rf "$work" && mkdir -p "$work"
node "$here/tiktoken_reference.cjs" "$modules" "$encoding" "$corpus" >"$work/reference.jsonl"
echo "tiktoken ($encoding): $(wc -l <"$work/reference.jsonl") cases"
TPTRAIN_TIKTOKEN_REFERENCE=$work/reference.jsonl TPTRAIN_TIKTOKEN_ENCODING=$encoding "$tests" "[tiktoken]"
"$exe" tokenize "$corpus" --out "$work/shards" --tokenizer "$encoding"
node "$here/tiktoken_reference.cjs" "$modules" "$encoding" "$corpus" "$work/shards/train_000000.bin"
