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
