# Checkpoint files and tptrain inspect on damaged files (uses _decks/_mpi2 from cli_tests.cmake).
#
# A checkpoint write that runs out of space (RLIMIT_FSIZE) or permission, in its own 2-rank
# process: besides the messages, the test checks that the process finalizes cleanly (libhdf5
# 1.10 crashes in MPI_Finalize after a failed H5Fclose; the exit status shows it).
add_test(NAME checkpoint_write_errors
         COMMAND ${_mpi2} $<TARGET_FILE:tptrain_tests> "[diskfull]")
set_tests_properties(checkpoint_write_errors PROPERTIES TIMEOUT 60)

# Damaged metadata (deleted, renamed or replaced links and attributes, a corrupt global heap,
# 400 byte flips), each case in a forked child with a time limit: no crash, no hang, no silent OK.
add_test(NAME checkpoint_damaged_metadata COMMAND tptrain_tests "[damage]")
set_tests_properties(checkpoint_damaged_metadata PROPERTIES TIMEOUT 120)
