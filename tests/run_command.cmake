# run(EXPECT COMMAND...) for the CLI test scripts run with `cmake -P`: runs the command (at most
# RUN_TIMEOUT seconds, default 120), echoes it with its output, and fails the script unless it
# exited normally with 0 (EXPECT "ok") or non-zero (EXPECT "fail"). The combined stdout and
# stderr go to `output` in the caller.
if(NOT DEFINED RUN_TIMEOUT)
  set(RUN_TIMEOUT 120)
endif()

function(run expect)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT ${RUN_TIMEOUT})
  message("$ ${ARGN}\n${out}${err}")
  if(NOT rc MATCHES "^[0-9]+$")
    message(FATAL_ERROR "did not exit normally: ${rc}")
  elseif(expect STREQUAL "ok" AND NOT rc EQUAL 0)
    message(FATAL_ERROR "expected exit 0, got ${rc}")
  elseif(expect STREQUAL "fail" AND rc EQUAL 0)
    message(FATAL_ERROR "expected a non-zero exit, got 0")
  endif()
  set(output "${out}${err}" PARENT_SCOPE)
endfunction()

# metrics_steps(OUT FILE LINES FIELDS): the records of metrics.jsonl FILE whose text matches the
# regex LINES, each cut to the part matching FIELDS ("\"step\": [0-9]+, \"loss\": ..."), as a
# list in OUT: two runs' curves compare as text, every digit.
function(metrics_steps out file lines fields)
  file(STRINGS ${file} records REGEX "${lines}")
  set(values "")
  foreach(record IN LISTS records)
    string(REGEX MATCH "${fields}" kv "${record}")
    list(APPEND values "${kv}")
  endforeach()
  set(${out} "${values}" PARENT_SCOPE)
endfunction()
