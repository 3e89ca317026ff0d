#!/usr/bin/env bash
# Generation speed, a benchmark (not a test): the time of one new token with the KV cache against
# the full forward of the context per token (`tptrain generate --no-kv-cache`), GPT-2 124M
# (input/gpt2-124m.toml's model) in fp32 on one rank at a context of 1020-1024 tokens.
#
#   jobs/bench-generate.sh [TOKENS]     default 4 new tokens per run
#
# Makes a checkpoint of random weights by one training step on GPT-2 tokens of this repository's
# README (a 124M model's first step: about a minute on two cores), then generates TOKENS tokens
# after a prompt of 1020 tokens ("the" and 1019 times " the", one GPT-2 token each) with and
# without the cache, and prints both runs' report lines and the ratio of their per-token times.
# Needs GPT-2's vocabulary (jobs/fetch-gpt2-vocab.sh). Environment: TPTRAIN_BUILD_DIR (default
# <repo>/build) or TPTRAIN_BIN; KEEP=1 keeps the scratch folder.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=jobs/env.sh
. "$root/jobs/env.sh"
exe=${TPTRAIN_BIN:-${TPTRAIN_BUILD_DIR:-$root/build}/tptrain}
tokens=${1:-4}
[ -x "$exe" ] || { echo "bench-generate: $exe not found: build first (jobs/build.sh)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tptrain-bench-generate.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

"$exe" tokenize "$root/README.md" "$root/docs/design.md" --out "$work/shards" --tokenizer gpt2 --valid-tokens 2048 >/dev/null
sets=(--set parallel.data=1 --set training.precision=fp32 --set training.recompute=selective
      --set training.global_batch=1 --set training.micro_batch=1 --set training.steps=1
      --set optimizer.warmup_steps=1 --set training.eval_interval=0 --set data.tokenizer=gpt2
      --set data.train="$work/shards/train_000000.bin" --set data.valid="$work/shards/valid_000000.bin"
      --set run.dir="$work/run" --set checkpoint.dir="$work/ck" --set checkpoint.resume=false)
echo "bench-generate: one training step of GPT-2 124M for a checkpoint of random weights" >&2
"$exe" train "$root/input/gpt2-124m.toml" "${sets[@]}" >"$work/train.log" 2>&1 ||
  { tail -20 "$work/train.log" >&2; exit 1; }
ck=$(ls "$work"/ck/step_*.h5 | tail -1)
prompt="the$(for _ in $(seq 1019); do printf ' the'; done)"
rate() { grep -o '"tokens_per_second": [0-9.e+-]*' "$1" | grep -o '[0-9.e+-]*$'; }
for mode in kv full; do
  flag=()
  [ $mode = full ] && flag=(--no-kv-cache)
  "$exe" generate "$root/input/gpt2-124m.toml" "${sets[@]}" --checkpoint "$ck" --prompt "$prompt" \
    --tokens "$tokens" --temperature 0 --ignore-eos "${flag[@]}" >"$work/$mode.out" 2>"$work/$mode.err" ||
    { cat "$work/$mode.err" >&2; exit 1; }
  grep '^generate:' "$work/$mode.err"
  grep '^{' "$work/$mode.err"
done
kv=$(rate "$work/kv.err") full=$(rate "$work/full.err")
awk -v kv="$kv" -v full="$full" 'BEGIN { printf "bench-generate: one new token at a 1020-1024 token context: %.4f s with the KV cache, %.4f s with the full forward: %.1fx faster\n", 1 / kv, 1 / full, kv / full }'
