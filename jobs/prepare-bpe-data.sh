#!/usr/bin/env bash
# Tokenizes the fortunes corpus with a BPE tokenizer (default gpt2) for input/gpt2-bpe-small.toml
# (gpt2) and input/llama-o200k-tiny.toml (o200k_base):
#
#   jobs/prepare-bpe-data.sh [TOKENIZER]  ->  <repo>/data/fortunes-TOKENIZER/train/train_000000.bin
#                                             <repo>/data/fortunes-TOKENIZER/valid/train_000000.bin
#
# TOKENIZER is gpt2, cl100k_base or o200k_base. Runs jobs/prepare-data.sh
# (data/fortunes/{train,valid}.txt from the Debian `fortunes` package) and the fetch of the
# tokenizer's files, pinned and checksummed (jobs/fetch-gpt2-vocab.sh, jobs/fetch-tiktoken-ranks.sh). Each text becomes
# JSON Lines, one fortune (a paragraph: the text between blank lines) per document, so
# `tptrain tokenize` puts <|endoftext|> between fortunes as GPT-2 does between documents and a
# model learns where a fortune ends (`generate` stops there). The deck names the two folders (a
# folder of shards is a dataset). The binary is $TPTRAIN_BIN, default <repo>/build/tptrain.
#
# Idempotent: when both folders hold shards newer than their text it does nothing, quietly.
# Shards are written to a temporary folder and renamed only when complete.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exe="${TPTRAIN_BIN:-$root/build/tptrain}"
tokenizer="${1:-gpt2}"
out="$root/data/fortunes-$tokenizer"

die() { echo "prepare-bpe-data: error: $*" >&2; exit 1; }

"$root/jobs/prepare-data.sh"
[ -x "$exe" ] || die "$exe not found: build tptrain first (jobs/build.sh) or set TPTRAIN_BIN"
case "$tokenizer" in
  gpt2) fetch="$root/jobs/fetch-gpt2-vocab.sh" ;;
  cl100k_base | o200k_base) fetch="$root/jobs/fetch-tiktoken-ranks.sh" ;;
  *) die "unknown tokenizer '$tokenizer': expected gpt2, cl100k_base or o200k_base" ;;
esac
"$fetch" >/dev/null || die "the $tokenizer tokenizer's files are not in place ($fetch, above)"

for split in train valid; do
  text="$root/data/fortunes/$split.txt"
  dest="$out/$split"
  shard="$dest/train_000000.bin"
  if [ -s "$shard" ] && [ "$shard" -nt "$text" ]; then
    continue
  fi
  mkdir -p "$out"
  tmp="$(mktemp -d "$out/.$split.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  /usr/bin/python3 -c '
import json, sys
with open(sys.argv[1], encoding="utf-8", errors="strict") as f, open(sys.argv[2], "w", encoding="utf-8") as out:
    for doc in f.read().split("\n\n"):
        if doc.strip():
            out.write(json.dumps({"text": doc.strip("\n") + "\n"}) + "\n")
' "$text" "$tmp/fortunes.jsonl"
  "$exe" tokenize "$tmp/fortunes.jsonl" --out "$tmp/shards" --tokenizer "$tokenizer"
  rm -rf "$dest"
  mv "$tmp/shards" "$dest"
  rm -rf "$tmp"
  trap - EXIT
done
