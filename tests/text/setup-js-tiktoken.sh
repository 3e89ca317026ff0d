#!/usr/bin/env bash
# Installs js-tiktoken, the reference GPT-2 tokenizer of tests/text/compare_tiktoken.sh, into a
# cache folder with `npm ci`: the versions and their sha512 are pinned by
# tests/text/js-tiktoken/package-lock.json. Prints the node_modules folder. Quiet and offline
# once installed. Exit 77 when npm is not installed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v npm >/dev/null 2>&1 || { echo "setup-js-tiktoken: npm not found" >&2; exit 77; }
if [ -n "${XDG_CACHE_HOME:-}" ] && [ "${XDG_CACHE_HOME#/}" != "$XDG_CACHE_HOME" ]; then
  cache=$XDG_CACHE_HOME/tptrain
else
  cache=${HOME:?neither XDG_CACHE_HOME nor HOME is set}/.cache/tptrain
fi
dir=$cache/js-tiktoken
# One install at a time: parallel ctest starts several comparisons at once on a fresh cache, and
# two `npm ci` in one folder fail each other.
mkdir -p "$cache"
exec 9>"$cache/js-tiktoken.lock"
flock 9
if ! cmp -s "$here/js-tiktoken/package-lock.json" "$dir/package-lock.json" ||
   [ ! -f "$dir/node_modules/js-tiktoken/package.json" ]; then
  mkdir -p "$dir"
  cp "$here/js-tiktoken/package.json" "$here/js-tiktoken/package-lock.json" "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --silent >&2) ||
    { echo "setup-js-tiktoken: npm ci in $dir failed (is the npm registry reachable?)" >&2; exit 1; }
fi
echo "$dir/node_modules"
