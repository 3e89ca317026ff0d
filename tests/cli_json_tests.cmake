# Every JSON line tptrain writes parses with a strict parser (tests/strict_json.py): plan, check
# --json, bench, eval and metrics.jsonl, with figures beyond a double and an fp16 run whose loss is
# not finite, where null must stand. Uses _decks, _run, _mpi2 from cli_tests.cmake.
add_test(NAME cli_strict_json
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/strict_json.py ${CMAKE_CURRENT_BINARY_DIR}/strict_json
                 $<TARGET_FILE:tptrain> ${PROJECT_SOURCE_DIR} ${_run}/ck/step_00000004.h5 ${_run} ${_mpi2})
set_tests_properties(cli_strict_json PROPERTIES FIXTURES_REQUIRED small_run TIMEOUT 300)
