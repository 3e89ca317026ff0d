# The test main on 2 ranks with Catch2's -o (tests/main.cpp): rank 0 reports to the file asked
# for, rank 1 to <name>.rank1<ext>; a rank that cannot write its report ends the run on both
# ranks with the reason, at once. Before, rank 1 refused the command line (the main appended a
# second --out to it) and left, and rank 0 waited in the first collective test forever.
#   cmake -DMPIEXEC="mpiexec;-n;2;..." -DEXE=tptrain_tests -DDIR=work/dir -P test_main_reports.cmake
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})

function(run_tests expect_rc)
  execute_process(COMMAND ${MPIEXEC} ${EXE} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 60)
  message("${out}${err}")
  if(NOT rc STREQUAL "${expect_rc}")
    message(FATAL_ERROR "${EXE} ${ARGN}: expected exit status ${expect_rc}, got '${rc}'")
  endif()
  set(output "${out}${err}" PARENT_SCOPE)
endfunction()

# A report file per rank; the [stop_signal] tests include collective ones.
run_tests(0 -o ${DIR}/report.txt "[stop_signal]")
foreach(f report.txt report.rank1.txt)
  if(NOT EXISTS ${DIR}/${f})
    message(FATAL_ERROR "no ${DIR}/${f}")
  endif()
  file(READ ${DIR}/${f} report)
  if(NOT report MATCHES "All tests passed")
    message(FATAL_ERROR "${f} does not report a pass:\n${report}")
  endif()
endforeach()

# --out=FILE and a name without an extension.
run_tests(0 --out ${DIR}/plain "[stop_signal]")
if(NOT EXISTS ${DIR}/plain OR NOT EXISTS ${DIR}/plain.rank1)
  message(FATAL_ERROR "expected ${DIR}/plain and ${DIR}/plain.rank1")
endif()

# Rank 1 cannot write its report (a directory is in the way): both ranks stop before any test.
file(MAKE_DIRECTORY ${DIR}/blocked.rank1.txt)
run_tests(1 -o ${DIR}/blocked.txt "[stop_signal]")
if(NOT output MATCHES "tptrain_tests: cannot start: cannot write the report file [^\n]*blocked.rank1.txt: Is a directory \\[rank 1\\]")
  message(FATAL_ERROR "expected rank 1's reason")
endif()

# An option Catch2 does not know: refused on every rank, one agreed end.
run_tests(1 --no-such-option "[stop_signal]")
if(NOT output MATCHES "tptrain_tests: cannot start: the command line was refused")
  message(FATAL_ERROR "expected the refusal of the command line")
endif()
