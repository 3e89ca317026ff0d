# Tests of the tptrain executable itself: deck errors through `tptrain check`, and a world size
# that does not match the deck (every rank must exit non-zero, quickly, with one message).
set(_decks ${CMAKE_CURRENT_SOURCE_DIR}/data/cli)

add_test(NAME cli_version COMMAND tptrain --version)
set_tests_properties(cli_version PROPERTIES PASS_REGULAR_EXPRESSION "tptrain [0-9]+\\.[0-9]+")

add_test(NAME cli_check_ok COMMAND tptrain check ${_decks}/valid.toml)
set_tests_properties(cli_check_ok PROPERTIES PASS_REGULAR_EXPRESSION "valid \\(needs 2 MPI ranks")

# Each bad deck: non-zero exit and a message naming the key and the line.
function(tptrain_bad_deck_test name deck regex)
  add_test(NAME cli_check_${name} COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tptrain>
           "-DARGS=check;${_decks}/${deck}" -DEXPECT_FAIL=1 "-DREGEX=${regex}"
           -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
endfunction()
tptrain_bad_deck_test(typo typo.toml "typo.toml:[0-9]+:.*model\\.hiden.*did you mean model\\.hidden")
tptrain_bad_deck_test(wrong_type wrong_type.toml "wrong_type.toml:[0-9]+:.*model\\.layers")
tptrain_bad_deck_test(heads_indivisible heads.toml "heads.toml:[0-9]+:.*model\\.heads")
tptrain_bad_deck_test(bad_layout layout.toml "layout.toml:[0-9]+:.*parallel\\.tensor")
add_test(NAME cli_check_set_override COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tptrain>
         "-DARGS=check;${_decks}/valid.toml;--set;model.heads=3" -DEXPECT_FAIL=1
         "-DREGEX=--set model\\.heads=3" -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)

# 2 ranks for a deck that needs 4: both ranks exit non-zero, one message, in seconds.
add_test(NAME cli_world_size_mismatch
         COMMAND ${CMAKE_COMMAND} -DCMD=${MPIEXEC_EXECUTABLE}
         "-DARGS=${MPIEXEC_NUMPROC_FLAG};2;${TPTRAIN_MPIEXEC_FLAGS};$<TARGET_FILE:tptrain>;train;${_decks}/needs4.toml"
         -DEXPECT_FAIL=1 "-DREGEX=started 2 ranks but .*= 4 ranks" -DCOUNT_REGEX=started
         -DCOUNT=1 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set_tests_properties(cli_world_size_mismatch PROPERTIES TIMEOUT 30)
