# Datasets of many shards (docs/design.md, "Datasets"; uses TPTRAIN_MPIEXEC_FLAGS).

# One stream as one shard or many, as a pattern or a folder: the same losses on 2 ranks; bad
# sets refused by key.
add_test(NAME cli_train_shard_set
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:tptrain>
                 "-DMPI2=${MPIEXEC_EXECUTABLE};${MPIEXEC_NUMPROC_FLAG};2;${TPTRAIN_MPIEXEC_FLAGS}"
                 -DDATA=${CMAKE_CURRENT_SOURCE_DIR}/data -DDIR=${CMAKE_CURRENT_BINARY_DIR}/shard_set_train
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/shard_set_train.cmake)
set_tests_properties(cli_train_shard_set PROPERTIES TIMEOUT 300 ENVIRONMENT "${TPTRAIN_TEST_ENV}")

# The resident set does not grow with the data (256 MiB vs 2 GiB of sparse shards) nor with the
# steps (20 vs 1000): peaks within 8 MiB. A scan of every token at open, or mapped pages never
# released, fails it (jobs/shard-rss.sh).
add_test(NAME data_shard_rss_flat COMMAND ${PROJECT_SOURCE_DIR}/jobs/shard-rss.sh 256@1000 2048@20 2048@1000)
set_tests_properties(data_shard_rss_flat PROPERTIES TIMEOUT 120
                     ENVIRONMENT "MAX_SPREAD_MIB=8;TPTRAIN_BIN=$<TARGET_FILE:tptrain>;TMPDIR=${CMAKE_CURRENT_BINARY_DIR}")
# The same with version-2 shards (uint32 tokens): 2 GiB of them in two shards.
add_test(NAME data_shard_rss_flat_v2 COMMAND ${PROJECT_SOURCE_DIR}/jobs/shard-rss.sh 256@200 2048@200)
set_tests_properties(data_shard_rss_flat_v2 PROPERTIES TIMEOUT 120
                     ENVIRONMENT "SHARD_VERSION=2;MAX_SPREAD_MIB=8;TPTRAIN_BIN=$<TARGET_FILE:tptrain>;TMPDIR=${CMAKE_CURRENT_BINARY_DIR}")

# Version-2 shards (uint32 ids) train Llama 3's vocabulary (input/llama3-tiny.toml) and resume
# bit for bit; a set mixing versions is refused by key (shards_v2_train.cmake).
add_test(NAME cli_train_shards_v2
         COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:tptrain>
                 "-DMPI2=${MPIEXEC_EXECUTABLE};${MPIEXEC_NUMPROC_FLAG};2;${TPTRAIN_MPIEXEC_FLAGS}"
                 -DPY=/usr/bin/python3 -DDECK=${PROJECT_SOURCE_DIR}/input/llama3-tiny.toml
                 -DDATA=${CMAKE_CURRENT_SOURCE_DIR}/data -DDIR=${CMAKE_CURRENT_BINARY_DIR}/shards_v2_train
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/shards_v2_train.cmake)
set_tests_properties(cli_train_shards_v2 PROPERTIES TIMEOUT 300 ENVIRONMENT "${TPTRAIN_TEST_ENV}")

# Weighted blends (data.train / data.valid as arrays of {path, weight}): shares within 0.03 of
# 0.8 / 0.2 over 200 steps, the same on 1 and 2 ranks and across a resume; eval per dataset;
# a resume under a changed blend refused, then allowed with data_share counting what was drawn;
# weights whose sum overflows; bad blends refused by entry (data_blend_train.py).
add_test(NAME cli_data_blend
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/data_blend_train.py $<TARGET_FILE:tptrain>
                 ${CMAKE_CURRENT_BINARY_DIR}/data_blend ${CMAKE_CURRENT_SOURCE_DIR}/data/cli
                 ${MPIEXEC_EXECUTABLE} ${TPTRAIN_MPIEXEC_FLAGS})
set_tests_properties(cli_data_blend PROPERTIES TIMEOUT 600 ENVIRONMENT "${TPTRAIN_TEST_ENV}")
