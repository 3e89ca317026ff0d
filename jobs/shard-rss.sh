#!/usr/bin/env bash
# Resident memory of training against the size of the data and the number of steps
# (docs/design.md, "Datasets"): for each SIZE, a synthetic set of llm.c shards of SIZE MiB in all is made in a temporary folder
# (sparse files: real headers, the tokens a hole that reads as token 0, so the disk holds almost
# nothing), a small byte-level model (tests/data/cli/valid.toml, 1 rank) trains STEPS steps on
# it (4 sequences of 16 tokens a step), and the run's resident set at the end and its peak (VmRSS and VmHWM of /proc/self/status,
# tptrain's "memory at the end" line) are printed beside the set's size. Each set is removed
# before the next is made.
#
#   jobs/shard-rss.sh SIZE_MB[@STEPS] [SIZE_MB[@STEPS]...]      STEPS default 200
#
# Environment: MAX_SPREAD_MIB (when set: exit 1 unless the peaks of all runs lie within that
# many MiB of each other: the ctests data_shard_rss_flat and data_shard_rss_flat_v2),
# SHARD_VERSION (1: uint16 tokens, the default; 2: uint32 tokens), TPTRAIN_BUILD_DIR (default
# <repo>/build) or TPTRAIN_BIN, TMPDIR.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=jobs/env.sh
. "$root/jobs/env.sh" >/dev/null
exe=${TPTRAIN_BIN:-${TPTRAIN_BUILD_DIR:-$root/build}/tptrain}
[ -x "$exe" ] || { echo "shard-rss: $exe not found: build first (jobs/build.sh)" >&2; exit 1; }
[ $# -gt 0 ] || { echo "usage: jobs/shard-rss.sh SIZE_MB[@STEPS] [SIZE_MB[@STEPS]...]" >&2; exit 2; }
version=${SHARD_VERSION:-1}
case "$version" in 1|2) ;; *) echo "shard-rss: SHARD_VERSION=$version: expected 1 (uint16) or 2 (uint32)" >&2; exit 2;; esac
work=$(mktemp -d "${TMPDIR:-/tmp}/tptrain-shard-rss.XXXXXX")
trap 'rm -rf "$work"' EXIT

peaks=()
for arg in "$@"; do
  mib=${arg%@*}
  steps=200
  [ "$arg" = "$mib" ] || steps=${arg#*@}
  set_dir=$work/set
  rm -rf "$set_dir" "$work/run"
  mkdir -p "$set_dir"
  # Shards of at most 1 GiB (the header's int32 count allows 4 GiB), the last one smaller.
  /usr/bin/python3 - "$set_dir" "$mib" "$version" <<'EOF'
import struct, sys
folder, version = sys.argv[1], int(sys.argv[3])
width = 2 if version == 1 else 4             # bytes per token
total = int(sys.argv[2]) * 2**20 // width    # tokens
per, k = 2**30 // width, 0
while total > 0:
    n = min(per, total)
    header = [0] * 256
    header[0:5] = [20240520, version, n, 256, 1]   # magic, version, count, vocabulary: bytes, 256
    with open(f"{folder}/train_{k:06d}.bin", "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.truncate(1024 + width * n)               # a hole: tokens read as 0, no disk used
    total -= n
    k += 1
EOF
  bytes=$(du -b --apparent-size -s "$set_dir" | cut -f1)
  log=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$exe" train "$root/tests/data/cli/valid.toml" \
          --set parallel.tensor=1 --set data.train="$set_dir" --set data.valid= \
          --set training.steps="$steps" --set training.log_interval="$steps" \
          --set run.dir="$work/run" --set checkpoint.dir="$work/run/ck" --set checkpoint.resume=false 2>&1) || {
    echo "$log" >&2
    echo "shard-rss: training on $mib MiB failed" >&2
    exit 1
  }
  line=$(grep -o 'resident set [0-9.]* MiB, peak [0-9.]* MiB' <<<"$log" | tail -1)
  [ -n "$line" ] || { echo "$log" >&2; echo "shard-rss: no 'resident set' line in the log" >&2; exit 1; }
  rss=$(awk '{print $3}' <<<"$line")
  peak=$(awk '{print $6}' <<<"$line")
  printf 'dataset %6d MiB (%d bytes, %d shard(s)), %d steps: VmRSS %s MiB, VmHWM %s MiB\n' \
    "$mib" "$bytes" "$(ls "$set_dir" | wc -l)" "$steps" "$rss" "$peak"
  peaks+=("$peak")
  rm -rf "$set_dir"
done

if [ -n "${MAX_SPREAD_MIB:-}" ]; then
  printf '%s\n' "${peaks[@]}" | awk -v max="$MAX_SPREAD_MIB" '
    NR == 1 { lo = $1; hi = $1 } { if ($1 < lo) lo = $1; if ($1 > hi) hi = $1 }
    END {
      printf "peak resident sets span %.1f MiB (at most %s MiB allowed)\n", hi - lo, max
      exit (hi - lo <= max) ? 0 : 1
    }'
fi
