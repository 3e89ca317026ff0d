# Multiple-choice evaluation (`tptrain eval --tasks`, training.tasks; tests/multiple_choice_eval.py):
# each ending's tokens and log-likelihood against lm-eval's split rule and an independent float64
# forward of the exported checkpoint, on 1 rank and on tensor 2, pipeline 2 and data 2; a byte-level
# GPT-2 and Llama, a GPT-2 BPE model (tokens from tiktoken's core); and metrics.jsonl's mc_accuracy
# during training equal to eval --tasks on the same checkpoints. The Catch2 cases are
# tests/io/test_multiple_choice_tasks.cpp and tests/driver/test_multiple_choice.cpp.
foreach(_case bytes bpe in-loop)
  add_test(NAME cli_multiple_choice_${_case}
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/multiple_choice_eval.py ${_case}
                   $<TARGET_FILE:tptrain> ${CMAKE_CURRENT_BINARY_DIR}/multiple_choice_${_case} ${PROJECT_SOURCE_DIR}
                   ${MPIEXEC_EXECUTABLE} ${TPTRAIN_MPIEXEC_FLAGS})
  set_tests_properties(cli_multiple_choice_${_case} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600
                       ENVIRONMENT "${TPTRAIN_TEST_ENV}")
endforeach()
set_tests_properties(cli_multiple_choice_bpe PROPERTIES FIXTURES_REQUIRED gpt2_vocab)
