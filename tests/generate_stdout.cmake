# generate's stdout is the sample and nothing else (issue 49): run CMD twice with the same seed,
# stdout and stderr apart; stdout must start with the prompt (PROMPT), hold no log line (the
# checkpoint's "read and verified in ... s", the rank map, warnings: they go to stderr) and be the
# same both times, while stderr carries the log.
foreach(i 1 2)
  execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out${i} ERROR_VARIABLE err${i} TIMEOUT 60)
  message("$ ${CMD}\n--- stdout:\n${out${i}}--- stderr:\n${err${i}}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "expected exit 0, got ${rc}")
  endif()
endforeach()
string(FIND "${out1}" "${PROMPT}" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "stdout does not start with the prompt '${PROMPT}'")
endif()
if(out1 MATCHES "read and verified|MB/s\\)|tptrain: |ranks: ")
  message(FATAL_ERROR "stdout holds a log line: '${CMAKE_MATCH_0}'")
endif()
if(NOT out1 STREQUAL out2)
  message(FATAL_ERROR "two generations with the same seed printed different stdout")
endif()
if(NOT err1 MATCHES "checkpoint .* read and verified")
  message(FATAL_ERROR "stderr lacks the checkpoint's log line")
endif()
