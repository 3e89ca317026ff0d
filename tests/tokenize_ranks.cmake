# `tptrain tokenize` writes the same shards, byte for byte, on 1, 2 and 4 ranks and whatever the
# segment size; it will not overwrite shards; a run that fails leaves nothing behind.
#   cmake -DEXE=tptrain "-DMPI=mpiexec;flags...;-n" -DDATA=tests/data -DDIR=work -P tokenize_ranks.cmake
# (MPI ends with the flag that takes the rank count.)
cmake_minimum_required(VERSION 3.16)
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
set(inputs ${DATA}/text/gpt2_corpus.txt ${DATA}/text/docs.jsonl ${DATA}/cli/corpus.txt)
set(small --shard-tokens 100 --valid-tokens 150 --segment-bytes 64)

include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)

function(shards dir var)
  file(GLOB names RELATIVE ${dir} ${dir}/*)
  list(SORT names)
  set(${var} ${names} PARENT_SCOPE)
endfunction()

function(same_shards reference other)
  shards(${reference} a)
  shards(${other} b)
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "${other} holds [${b}], ${reference} holds [${a}]")
  endif()
  foreach(name IN LISTS a)
    execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${reference}/${name} ${other}/${name} RESULT_VARIABLE differ)
    if(differ)
      message(FATAL_ERROR "${other}/${name} differs from ${reference}/${name}")
    endif()
  endforeach()
endfunction()

# The reference: one process, the default segment size (the whole input in one segment).
run(ok ${EXE} tokenize ${inputs} --out ${DIR}/reference --shard-tokens 100 --valid-tokens 150)
shards(${DIR}/reference names)
list(FILTER names INCLUDE REGEX "^valid_00000[01]\\.bin$")
list(LENGTH names valid)
shards(${DIR}/reference all)
list(LENGTH all count)
if(NOT valid EQUAL 2 OR count LESS 5)
  message(FATAL_ERROR "expected 2 valid and at least 3 train shards, got [${all}]")
endif()
foreach(n 1 2 4)
  run(ok ${MPI} ${n} ${EXE} tokenize ${inputs} --out ${DIR}/ranks${n} ${small})
  if(NOT output MATCHES "on ${n} rank")
    message(FATAL_ERROR "the summary does not say ${n} ranks")
  endif()
  same_shards(${DIR}/reference ${DIR}/ranks${n})
endforeach()

# The bytes tokenizer too (no end-of-text token).
run(ok ${EXE} tokenize ${inputs} --out ${DIR}/bytes1 --tokenizer bytes --shard-tokens 500)
run(ok ${MPI} 3 ${EXE} tokenize ${inputs} --out ${DIR}/bytes3 --tokenizer bytes --shard-tokens 500 --segment-bytes 50)
same_shards(${DIR}/bytes1 ${DIR}/bytes3)

# tiktoken's o200k_base too (version-2 shards, uint32 ids), when jobs/fetch-tiktoken-ranks.sh has
# put its rank file in the cache.
if(DEFINED ENV{XDG_CACHE_HOME})
  set(ranks $ENV{XDG_CACHE_HOME}/tptrain/tiktoken/o200k_base.tiktoken)
else()
  set(ranks $ENV{HOME}/.cache/tptrain/tiktoken/o200k_base.tiktoken)
endif()
if(EXISTS ${ranks})
  run(ok ${EXE} tokenize ${inputs} --out ${DIR}/o200k1 --tokenizer o200k_base --shard-tokens 100 --valid-tokens 150)
  run(ok ${MPI} 3 ${EXE} tokenize ${inputs} --out ${DIR}/o200k3 --tokenizer o200k_base ${small})
  same_shards(${DIR}/o200k1 ${DIR}/o200k3)
else()
  message(STATUS "${ranks} is missing: o200k_base not compared")
endif()

# Shards already there are not overwritten.
run(fail ${EXE} tokenize ${inputs} --out ${DIR}/reference)
if(NOT output MATCHES "already holds train_000000.bin and [0-9]+ more shards: tokenize does not overwrite shards")
  message(FATAL_ERROR "no refusal to overwrite")
endif()

# A failing run on 2 ranks: one message naming the file and the byte offset, and nothing left.
run(fail ${MPI} 2 ${EXE} tokenize ${inputs} ${DATA}/text/not_utf8.txt --out ${DIR}/failed ${small})
string(REGEX MATCHALL "tptrain: error" errors "${output}")
list(LENGTH errors n)
if(NOT n EQUAL 1 OR NOT output MATCHES "not_utf8.txt', byte offset 37: not valid UTF-8")
  message(FATAL_ERROR "expected one message naming not_utf8.txt and byte offset 37")
endif()
file(GLOB left LIST_DIRECTORIES true ${DIR}/failed/* ${DIR}/failed/.*)
if(left)
  message(FATAL_ERROR "a failed run left [${left}]")
endif()
