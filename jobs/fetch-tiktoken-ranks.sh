#!/usr/bin/env bash
# Fetches tiktoken's rank files cl100k_base.tiktoken and o200k_base.tiktoken, for
# data.tokenizer = "cl100k_base" | "o200k_base" and `tptrain tokenize --tokenizer ...`:
#
#   jobs/fetch-tiktoken-ranks.sh [DIR]     default: ${XDG_CACHE_HOME:-$HOME/.cache}/tptrain/tiktoken
#
# Source: the npm package @dqbd/tiktoken (MIT license), tiktoken's WebAssembly build, which ships
# OpenAI's ranks in its encoders/*.json ("bpe_ranks": lines of "! FIRST_RANK TOKEN TOKEN ...",
# each token base64). The version is pinned and the tarball's SHA-256 checked; node writes each
# encoding back in tiktoken's own format (one "BASE64 RANK" line per token, in rank order), and
# the result must have the SHA-256 that tiktoken checks for OpenAI's original files
# (tiktoken_ext/openai_public.py), so the ranks are OpenAI's byte for byte. Nothing downloaded goes into the repository. Run by jobs/setup-deps.sh.
#
# Idempotent and quiet when DIR already holds the right files. Exit 0: the files are there;
# 77: npm or node is not installed (nothing fetched; the tests that need the files are skipped);
# 1: the download or a checksum failed.
set -euo pipefail

version=1.0.22
tarball_sha256=67ae64fbbe889ff19b74d4e95a16da403b24aee6a506b74a9b84908a5d6f15a1
# OpenAI's digests are also in text/tiktoken_encoding.cpp, which checks every named rank file
# tptrain reads against them; tests/text/test_tiktoken_file.cpp holds the two tables equal.
declare -A file_sha256=(
  [cl100k_base]=223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7
  [o200k_base]=446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d
)

# shellcheck source=jobs/cache-dir.sh
. "$(dirname "${BASH_SOURCE[0]}")/cache-dir.sh"
dir=$(cache_dir fetch-tiktoken-ranks tiktoken "$@") || exit 1

die() { echo "fetch-tiktoken-ranks: error: $*" >&2; exit 1; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }
have_files() {
  local name
  for name in "${!file_sha256[@]}"; do
    [ -f "$1/$name.tiktoken" ] && [ "$(sha_of "$1/$name.tiktoken")" = "${file_sha256[$name]}" ] || return 1
  done
}

have_files "$dir" && exit 0
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found (Debian: coreutils)"
for tool in npm node; do
  if ! command -v $tool >/dev/null 2>&1; then
    echo "fetch-tiktoken-ranks: $tool not found: tiktoken's rank files were not fetched into $dir (install" \
         "Node.js and npm - Debian: npm - or copy cl100k_base.tiktoken and o200k_base.tiktoken there yourself)" >&2
    exit 77
  fi
done

mkdir -p "$dir" || die "cannot create $dir"
tmp=$(mktemp -d "$dir/.fetch.XXXXXX") || die "cannot write in $dir"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@dqbd/tiktoken@$version" >/dev/null) ||
  die "npm pack @dqbd/tiktoken@$version failed (is the npm registry reachable?)"
tgz=$tmp/dqbd-tiktoken-$version.tgz
[ -f "$tgz" ] || die "npm pack did not produce $(basename "$tgz")"
got=$(sha_of "$tgz")
[ "$got" = "$tarball_sha256" ] ||
  die "$(basename "$tgz") has SHA-256 $got, expected $tarball_sha256 (a changed or corrupted package; nothing installed)"
tar -xzf "$tgz" -C "$tmp" package/encoders/cl100k_base.json package/encoders/o200k_base.json ||
  die "cannot unpack the encoders from $(basename "$tgz")"
for name in "${!file_sha256[@]}"; do
  node -e '
    const fs = require("fs");
    const [json, out] = process.argv.slice(1);
    const ranks = [];
    for (const line of JSON.parse(fs.readFileSync(json, "utf8")).bpe_ranks.split("\n")) {
      if (!line) continue;
      const [, first, ...tokens] = line.split(" ");
      tokens.forEach((token, i) => { ranks.push([Number(first) + i, token]); });
    }
    ranks.sort((a, b) => a[0] - b[0]);
    fs.writeFileSync(out, ranks.map(([rank, token]) => `${token} ${rank}\n`).join(""));
  ' "$tmp/package/encoders/$name.json" "$tmp/$name.tiktoken" || die "cannot convert $name.json to tiktoken's format"
  got=$(sha_of "$tmp/$name.tiktoken")
  [ "$got" = "${file_sha256[$name]}" ] ||
    die "$name.tiktoken made from the package has SHA-256 $got, expected OpenAI's ${file_sha256[$name]}"
done
# Each file appears whole or not at all (a rename within one folder).
for name in "${!file_sha256[@]}"; do mv -f "$tmp/$name.tiktoken" "$dir/$name.tiktoken"; done
echo "fetch-tiktoken-ranks: cl100k_base.tiktoken and o200k_base.tiktoken (npm @dqbd/tiktoken@$version, MIT) are in $dir" >&2
