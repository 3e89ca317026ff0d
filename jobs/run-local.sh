#!/usr/bin/env bash
# The main job of the README: installs what is missing, builds, prepares the fortunes corpus
# (and its BPE shards when the deck reads data/fortunes-TOKENIZER), trains the model of DECK
# (default input/tiny.toml) under mpiexec with as many ranks as the deck's [parallel] layout
# needs, then prints a sample from the final checkpoint.
#   jobs/run-local.sh [DECK] [--set section.key=value ...]
#   jobs/run-local.sh input/gpt2-bpe-small.toml      # the main job on real text (GPT-2 BPE)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deck=${1:-$root/input/tiny.toml}
shift $(( $# > 0 ? 1 : 0 ))

"$root/jobs/build.sh"
# shellcheck source=jobs/env.sh
. "$root/jobs/env.sh"
"$root/jobs/prepare-data.sh"
exe=${TPTRAIN_BUILD_DIR:-$root/build}/tptrain
# A deck that reads the fortunes' BPE shards gets them made first (the deck check below wants
# its data files to exist).
for tokenizer in gpt2 cl100k_base o200k_base; do
  if grep -q "fortunes-$tokenizer" "$deck"; then TPTRAIN_BIN=$exe "$root/jobs/prepare-bpe-data.sh" "$tokenizer"; fi
done

# `tptrain check` validates the deck (no MPI): --ranks prints the rank count alone, --json the
# resolved deck as one JSON object, where the checkpoint folder is read from.
ranks=$("$exe" check "$deck" "$@" --ranks)
resolved=$("$exe" check "$deck" "$@" --json)
field() { /usr/bin/python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$resolved" "$1"; }
ckdir=$(field checkpoint.dir)
# A BPE (GPT-2's, tiktoken's) attaches a word's leading space to the word: a BPE prompt ends
# before the space.
# A fortune often ends within a few tokens; --ignore-eos shows several, <|endoftext|> between them.
prompt="The "
extra=()
case "$(field data.tokenizer)" in
  gpt2 | cl100k_base | o200k_base | tiktoken:*) prompt="The"; extra=(--ignore-eos) ;;
esac

cores=$(nproc 2>/dev/null || echo 1)
flags=()
if mpiexec --version 2>/dev/null | grep -q "Open MPI\|OpenRTE"; then
  [ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
  [ "$ranks" -gt "$cores" ] && flags+=(--oversubscribe)
  flags+=(--bind-to none)
fi
# One BLAS thread per rank when ranks fill the cores (OpenBLAS would oversubscribe otherwise).
threads=$(( cores / ranks > 0 ? cores / ranks : 1 ))
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads

echo "tptrain: mpiexec -n $ranks $exe train $deck $*"
mpiexec -n "$ranks" "${flags[@]}" "$exe" train "$deck" "$@"

latest=$(ls -1 "$ckdir"/step_*.h5 2>/dev/null | sort | tail -n 1)
if [ -n "$latest" ]; then
  echo "tptrain: sample from $latest"
  mpiexec -n "$ranks" "${flags[@]}" "$exe" generate "$deck" "$@" --checkpoint "$latest" \
    --prompt "$prompt" --tokens 300 --temperature 0.8 --top-k 40 --seed 1 "${extra[@]}"
fi
