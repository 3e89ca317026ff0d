# `tptrain tokenize` on hostile tiktoken rank files, on 1 and 2 ranks, one message each:
#   * a valid file whose last rank is 2^31 (or 2^31 - 1, 10^9) is named with its file and line,
#     under a 1 GiB address-space cap (ulimit -v), where a table sized by that rank cannot live;
#   * an edited cl100k_base.tiktoken (OpenAI's, two ranks swapped) read through --tokenizer-dir
#     is refused by its SHA-256 (when jobs/fetch-tiktoken-ranks.sh has put OpenAI's file in the
#     cache; said and skipped otherwise).
#   cmake -DEXE=tptrain "-DMPI=mpiexec;flags...;-n" -DDATA=tests/data -DDIR=work -P tokenize_rank_files.cmake
cmake_minimum_required(VERSION 3.16)
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)
set(input ${DATA}/text/docs.jsonl)
set(capped bash -c "ulimit -v 1048576 && exec \"$@\"" capped)
# Launchers as list items: one process, or mpiexec on 2 ranks ("|" for ";" inside an item).
string(REPLACE ";" "|" two_ranks "${MPI}|2|${EXE}")

function(fails_once_with regex)
  string(REGEX MATCHALL "tptrain: error" errors "${output}")
  list(LENGTH errors n)
  if(NOT n EQUAL 1 OR NOT output MATCHES "${regex}")
    message(FATAL_ERROR "expected one error matching '${regex}'")
  endif()
endfunction()

# Every byte (base64 of one byte: two characters and "=="), ranks 0..255, then "ab" at RANK.
set(alphabet "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
set(bytes "")
foreach(b RANGE 255)
  math(EXPR hi "${b} >> 2")
  math(EXPR lo "(${b} & 3) << 4")
  string(SUBSTRING "${alphabet}" ${hi} 1 c1)
  string(SUBSTRING "${alphabet}" ${lo} 1 c2)
  string(APPEND bytes "${c1}${c2}== ${b}\n")
endforeach()
foreach(rank 2147483648 2147483647 1000000000)
  set(ranks ${DIR}/huge_${rank}.tiktoken)
  file(WRITE ${ranks} "${bytes}YWI= ${rank}\n")
  set(launchers "${EXE}")  # and on 2 ranks for the first
  if(rank STREQUAL 2147483648)
    list(APPEND launchers "${two_ranks}")
  endif()
  foreach(launcher IN LISTS launchers)
    string(REPLACE "|" ";" launcher "${launcher}")
    run(fail ${capped} ${launcher} tokenize ${input} --out ${DIR}/out_${rank} --tokenizer tiktoken:${ranks}
        --tokenizer-pattern cl100k)
    fails_once_with("huge_${rank}.tiktoken:257: the rank \"${rank}\" is out of range: a file of 257 tokens has the ranks 0 \\.\\. 256")
  endforeach()
endforeach()

if(DEFINED ENV{XDG_CACHE_HOME})
  set(openai $ENV{XDG_CACHE_HOME}/tptrain/tiktoken/cl100k_base.tiktoken)
else()
  set(openai $ENV{HOME}/.cache/tptrain/tiktoken/cl100k_base.tiktoken)
endif()
if(NOT EXISTS ${openai})
  message(STATUS "${openai} is missing: the edited copy of cl100k_base not tried")
  return()
endif()
file(READ ${openai} text)
string(SUBSTRING "${text}" 0 14 head)
if(NOT head STREQUAL "IQ== 0\nIg== 1\n")
  message(FATAL_ERROR "${openai} does not start with the ranks of \"!\" and \"\\\"\"")
endif()
string(SUBSTRING "${text}" 14 -1 rest)
file(MAKE_DIRECTORY ${DIR}/edited)
file(WRITE ${DIR}/edited/cl100k_base.tiktoken "IQ== 1\nIg== 0\n${rest}")
foreach(launcher ${EXE} "${two_ranks}")
  string(REPLACE "|" ";" launcher "${launcher}")
  run(fail ${launcher} tokenize ${input} --out ${DIR}/edited_out --tokenizer cl100k_base --tokenizer-dir ${DIR}/edited)
  fails_once_with("edited/cl100k_base.tiktoken is not OpenAI's cl100k_base rank file: its SHA-256 is [0-9a-f]+, expected 223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7")
  if(EXISTS ${DIR}/edited_out/train_000000.bin)
    message(FATAL_ERROR "shards written from the edited file")
  endif()
endforeach()
