# Version-2 shards (uint32 tokens, docs/design.md "Data") train input/llama3-tiny.toml, Llama 3's
# 128256-token vocabulary, on 2 tensor-parallel ranks: 8 steps at once and 4 + a resume to 8
# give the same losses bit for bit, the checkpoint evaluates, and a set mixing a version-1
# shard in is refused, naming the set, a file of each version and both versions.
#   cmake -DEXE=tptrain "-DMPI2=mpiexec;-n;2;flags..." -DPY=python3 -DDECK=input/llama3-tiny.toml
#         -DDATA=tests/data -DDIR=work -P shards_v2_train.cmake
cmake_minimum_required(VERSION 3.16)
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR}/shards)
include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)

# Ids above 65535 with something to learn: each byte of the corpus, repeated, is mapped to an id
# spread over the vocabulary.
file(WRITE ${DIR}/write_shards.py [=[
import struct, sys
corpus, out = open(sys.argv[1], "rb").read(), sys.argv[2]
ids = [(b * 1009 + 17) % 128256 for b in corpus * 40]
def shard(path, tokens, version=2):
    header = [0] * 256
    header[0:5] = [20240520, version, len(tokens), 128256, 0]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%d%s" % (len(tokens), "I" if version == 2 else "H"), *tokens))
shard(f"{out}/valid_000000.bin", ids[:2000])
shard(f"{out}/train_000000.bin", ids[2000:8000])
shard(f"{out}/train_000001.bin", ids[8000:])
assert max(ids) > 65535
]=])
run(ok ${PY} ${DIR}/write_shards.py ${DATA}/cli/corpus.txt ${DIR}/shards)

set(sets --set data.train=${DIR}/shards/train_*.bin --set data.valid=${DIR}/shards/valid_*.bin
         --set training.log_interval=1 --set training.eval_interval=4 --set training.eval_windows=4
         --set optimizer.warmup_steps=2 --set checkpoint.interval=4 --set checkpoint.resume=true
         --set optimizer.decay=constant)  # a schedule that does not depend on training.steps (4 or 8)
run(ok ${MPI2} ${EXE} train ${DECK} ${sets} --set training.steps=8 --set run.dir=${DIR}/whole
    --set checkpoint.dir=${DIR}/whole/ck)
run(ok ${MPI2} ${EXE} train ${DECK} ${sets} --set training.steps=4 --set run.dir=${DIR}/halves
    --set checkpoint.dir=${DIR}/halves/ck)
run(ok ${MPI2} ${EXE} train ${DECK} ${sets} --set training.steps=8 --set run.dir=${DIR}/halves
    --set checkpoint.dir=${DIR}/halves/ck)
if(NOT output MATCHES "resuming from")
  message(FATAL_ERROR "the second half did not resume")
endif()

# The losses of metrics.jsonl, whole and halves, compared as text (every digit).
foreach(run whole halves)
  metrics_steps(${run}_losses ${DIR}/${run}/metrics.jsonl "\"loss\"" "\"step\": [0-9]+, \"loss\": [-0-9.e]+")
endforeach()
list(LENGTH whole_losses n)
if(n LESS 8)
  message(FATAL_ERROR "expected 8 training losses in whole/metrics.jsonl, found ${n}: ${whole_losses}")
endif()
if(NOT whole_losses STREQUAL halves_losses)
  message(FATAL_ERROR "version-2 shards: 8 steps gave [${whole_losses}], 4 + resume gave [${halves_losses}]")
endif()

run(ok ${MPI2} ${EXE} eval ${DECK} --set data.valid=${DIR}/shards/valid_*.bin --set data.train=${DIR}/shards/train_*.bin
    --checkpoint ${DIR}/whole/ck/step_00000008.h5)
if(NOT output MATCHES "\"eval_loss\": [0-9.]+")
  message(FATAL_ERROR "eval of the version-2 run printed no eval_loss")
endif()

# A version-1 shard among version-2 ones: refused, the set and both versions named.
file(COPY ${DIR}/shards/ DESTINATION ${DIR}/mixed)
file(WRITE ${DIR}/write_v1.py [=[
import struct, sys
header = [0] * 256
header[0:5] = [20240520, 1, 100, 0, 0]   # an llm.c shard: vocabulary not recorded
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack("<100H", *range(100)))
]=])
run(ok ${PY} ${DIR}/write_v1.py ${DIR}/mixed/train_000002.bin)
run(fail ${MPI2} ${EXE} train ${DECK} ${sets} --set data.train=${DIR}/mixed/train_*.bin --set training.steps=2
    --set run.dir=${DIR}/mixed_run --set checkpoint.dir=${DIR}/mixed_run/ck)
if(NOT output MATCHES "data '[^']*mixed/train_\\*\\.bin' mixes shard versions.*train_000000\\.bin' is version 2 \\(uint32 tokens\\).*train_000002\\.bin' is version 1 \\(uint16 tokens\\)")
  message(FATAL_ERROR "a set of two versions: no message naming the set and both versions")
endif()
message(STATUS "version-2 shards: 8 steps = 4 + resume bit for bit; eval runs; a mixed set is refused")
