# Generation with a KV cache and bits per byte on GPT-2 BPE data, end to end on 2 ranks
# (tests/bpe_generate_eval.py; the Catch2 cases are tests/train/test_generate.cpp and
# tests/model/test_kv_cache.cpp).
add_test(NAME cli_generate_eval_bpe
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/bpe_generate_eval.py $<TARGET_FILE:tptrain>
                 ${CMAKE_CURRENT_BINARY_DIR}/generate_eval_bpe ${PROJECT_SOURCE_DIR}
                 ${MPIEXEC_EXECUTABLE} ${TPTRAIN_MPIEXEC_FLAGS})
set_tests_properties(cli_generate_eval_bpe PROPERTIES FIXTURES_REQUIRED gpt2_vocab SKIP_RETURN_CODE 77 TIMEOUT 600)
