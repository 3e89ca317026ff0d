#!/usr/bin/env bash
# Tokenizes the fortunes corpus with GPT-2's BPE for input/gpt2-bpe-small.toml:
#
#   jobs/prepare-bpe-data.sh   ->  <repo>/data/fortunes-gpt2/train/train_000000.bin
#                                  <repo>/data/fortunes-gpt2/valid/train_000000.bin
#
# Runs jobs/prepare-data.sh (data/fortunes/{train,valid}.txt from the Debian `fortunes` package)
# and jobs/fetch-gpt2-vocab.sh (GPT-2's vocabulary, pinned and checksummed). Each text becomes
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
out="$root/data/fortunes-gpt2"

die() { echo "prepare-bpe-data: error: $*" >&2; exit 1; }

"$root/jobs/prepare-data.sh"
[ -x "$exe" ] || die "$exe not found: build tptrain first (jobs/build.sh) or set TPTRAIN_BIN"
"$root/jobs/fetch-gpt2-vocab.sh" >/dev/null || die "GPT-2's vocabulary is not in place (jobs/fetch-gpt2-vocab.sh, above)"

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
  "$exe" tokenize "$tmp/fortunes.jsonl" --out "$tmp/shards" --tokenizer gpt2
  rm -rf "$dest"
  mv "$tmp/shards" "$dest"
  rm -rf "$tmp"
  trap - EXIT
done
