# Every JSON line tptrain writes parses with a strict parser (tests/strict_json.py): plan, check
# --json, bench, eval and metrics.jsonl, with figures beyond a double and an fp16 run whose steps overflow,
# where null must stand. Uses _decks, _run, _mpi2 from cli_tests.cmake.
add_test(NAME cli_strict_json
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/strict_json.py ${CMAKE_CURRENT_BINARY_DIR}/strict_json
                 $<TARGET_FILE:tptrain> ${PROJECT_SOURCE_DIR} ${_run}/ck/step_00000004.h5 ${_run} ${_mpi2})
set_tests_properties(cli_strict_json PROPERTIES FIXTURES_REQUIRED small_run TIMEOUT 300)

# bench: --steps and --warmup are bounded (100000, 1000), and a warm-up says what it will take.
add_test(NAME cli_bench_warmup_bounded COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tptrain>
         "-DARGS=bench;${_decks}/bench.toml;--warmup;100000" -DEXPECT_FAIL=1
         "-DREGEX=--warmup: expected a non-negative integer no larger than 1000, got 100000"
         -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
add_test(NAME cli_bench_steps_bounded COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tptrain>
         "-DARGS=bench;${_decks}/bench.toml;--steps;100001" -DEXPECT_FAIL=1
         "-DREGEX=--steps: expected a positive integer no larger than 100000, got 100001"
         -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set_tests_properties(cli_bench_warmup_bounded cli_bench_steps_bounded PROPERTIES TIMEOUT 30)
add_test(NAME cli_bench_warmup_progress COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tptrain>
         "-DARGS=bench;${_decks}/bench.toml;--set;parallel.tensor=1;--steps;1;--warmup;3"
         "-DREGEX=bench: warm-up step 1/3 took [0-9.e+-]+ s: about [0-9.e+-]+ (s|min|h) more for the warm-up.*\\{\"bench\": "
         -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set_tests_properties(cli_bench_warmup_progress PROPERTIES TIMEOUT 60)
