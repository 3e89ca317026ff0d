#!/usr/bin/env bash
# Builds the byte-level English corpus used by input/tiny.toml from the Debian `fortunes`
# package:
#
#   jobs/prepare-data.sh        ->  <repo>/data/fortunes/train.txt, <repo>/data/fortunes/valid.txt
#
# Source: the plain-text fortune files in /usr/share/games/fortunes (those with a .dat index
# twin; the .dat indexes, the .u8 links and the off/ folder are not used). Override the folder
# with TPTRAIN_FORTUNES_DIR.
#
# Reproducible split: the files are concatenated in sorted (LC_ALL=C) order and split into
# fortunes on lines consisting of `%` (a file's end also ends a fortune; empty fortunes are
# dropped). Fortune k (counting from 0) goes to valid.txt when k % 20 == 19, to train.txt
# otherwise; each fortune is written followed by a blank line.
#
# Idempotent: when both outputs exist and are newer than this script it does nothing, quietly.
# Outputs are written to temporary names and renamed only when complete.
set -euo pipefail
export LC_ALL=C

script="${BASH_SOURCE[0]}"
root="$(cd "$(dirname "$script")/.." && pwd)"
src="${TPTRAIN_FORTUNES_DIR:-/usr/share/games/fortunes}"
out="$root/data/fortunes"
train="$out/train.txt"
valid="$out/valid.txt"
min_valid_bytes=50000     # the full `fortunes` package gives ~130 KB; fortunes-min alone ~1 KB

die() { echo "prepare-data: error: $*" >&2; exit 1; }

if [ -s "$train" ] && [ -s "$valid" ] && [ "$train" -nt "$script" ] && [ "$valid" -nt "$script" ]; then
  exit 0
fi

[ -d "$src" ] || die "$src not found: install the Debian package 'fortunes' (apt-get install fortunes) or run jobs/setup-deps.sh"

# Plain-text fortune files: every <name>.dat index with a regular file <name> beside it.
files=()
while IFS= read -r dat; do
  base="${dat%.dat}"
  case "$base" in *.u8) continue ;; esac
  [ -f "$base" ] && files+=("$base")
done < <(find "$src" -maxdepth 1 -name '*.dat' -type f | sort)
[ ${#files[@]} -gt 0 ] || die "no fortune files (<name> with <name>.dat) in $src: install the Debian package 'fortunes' or run jobs/setup-deps.sh"

mkdir -p "$out"
tmp_train="$(mktemp "$out/.train.txt.XXXXXX")"
tmp_valid="$(mktemp "$out/.valid.txt.XXXXXX")"
trap 'rm -f "$tmp_train" "$tmp_valid"' EXIT

counts="$(awk -v train="$tmp_train" -v valid="$tmp_valid" '
  function flush(   i, dest) {
    if (n > 0 && nonblank) {
      dest = (k % 20 == 19) ? valid : train
      for (i = 1; i <= n; i++) printf "%s\n", line[i] > dest
      printf "\n" > dest
      if (dest == valid) nv++; else nt++
      k++
    }
    n = 0; nonblank = 0
  }
  FNR == 1 && NR > 1 { flush() }            # a file ends its last fortune
  $0 == "%"          { flush(); next }
                     { line[++n] = $0; if ($0 ~ /[^ \t]/) nonblank = 1 }
  END                { flush(); close(train); close(valid); print nt + 0, nv + 0 }
' "${files[@]}")"
read -r n_train n_valid <<<"$counts"

train_bytes=$(wc -c <"$tmp_train" | tr -d ' ')
valid_bytes=$(wc -c <"$tmp_valid" | tr -d ' ')
[ "$valid_bytes" -ge "$min_valid_bytes" ] ||
  die "valid.txt would hold only $valid_bytes bytes (from ${#files[@]} files in $src; want >= $min_valid_bytes): install the full Debian package 'fortunes' (not only fortunes-min)"

chmod 644 "$tmp_train" "$tmp_valid"
mv -f "$tmp_train" "$train"
mv -f "$tmp_valid" "$valid"
trap - EXIT

echo "prepare-data: ${#files[@]} files from $src, $((n_train + n_valid)) fortunes"
echo "prepare-data: $train  $train_bytes bytes ($n_train fortunes)"
echo "prepare-data: $valid  $valid_bytes bytes ($n_valid fortunes)"
