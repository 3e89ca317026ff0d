# Generation with a KV cache and bits per byte on GPT-2 BPE data, end to end on 2 ranks
# (tests/bpe_generate_eval.py; the Catch2 cases are tests/train/test_generate.cpp and
# tests/model/test_kv_cache.cpp).
add_test(NAME cli_generate_eval_bpe
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/bpe_generate_eval.py $<TARGET_FILE:tptrain>
                 ${CMAKE_CURRENT_BINARY_DIR}/generate_eval_bpe ${PROJECT_SOURCE_DIR}
                 ${MPIEXEC_EXECUTABLE} ${TPTRAIN_MPIEXEC_FLAGS})
set_tests_properties(cli_generate_eval_bpe PROPERTIES FIXTURES_REQUIRED gpt2_vocab SKIP_RETURN_CODE 77 TIMEOUT 600)

# Packed documents (data.document_mask, data.reset_positions) on every layout against 1 rank,
# eval under pipeline 2 and generate past <|endoftext|> with and without the KV cache
# (tests/document_mask_layouts.py; the Catch2 cases are tests/model/test_document_mask.cpp).
add_test(NAME cli_document_mask_layouts
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/document_mask_layouts.py $<TARGET_FILE:tptrain>
                 ${CMAKE_CURRENT_BINARY_DIR}/document_mask_layouts ${PROJECT_SOURCE_DIR}
                 ${MPIEXEC_EXECUTABLE} ${TPTRAIN_MPIEXEC_FLAGS})
set_tests_properties(cli_document_mask_layouts PROPERTIES FIXTURES_REQUIRED gpt2_vocab SKIP_RETURN_CODE 77 TIMEOUT 600
                     ENVIRONMENT "${TPTRAIN_TEST_ENV}")
