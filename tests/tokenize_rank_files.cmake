# `tptrain tokenize` on hostile tiktoken rank files, on 1 and 2 ranks, one message each: a valid
# file whose last rank is 2^31 (or 2^31 - 1, 10^9) is named with its file and line, under a 1 GiB
# address-space cap (ulimit -v), where a table sized by that rank cannot live.
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

