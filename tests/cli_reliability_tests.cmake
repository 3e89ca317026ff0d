# Job reliability through the tptrain executable: every failure ends in one clear message from
# rank 0 and a non-zero exit on every rank within seconds (TIMEOUT turns a hang into a failure).
# Uses _decks, _run, _mpi2 from cli_tests.cmake.
set(_rel ${CMAKE_CURRENT_BINARY_DIR}/reliability)
file(MAKE_DIRECTORY ${_rel})
file(WRITE ${_rel}/regular_file "not a directory\n")
string(REPEAT c 300 _long_name)

# `tptrain ARGN` on 2 ranks must fail with `regex` in its output and `once` exactly once (one
# message, from rank 0, not one per rank).
function(tptrain_mpi2_fails_once name regex once)
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -DCMD=${MPIEXEC_EXECUTABLE}
           "-DARGS=${MPIEXEC_NUMPROC_FLAG};2;${TPTRAIN_MPIEXEC_FLAGS};$<TARGET_FILE:tptrain>;${ARGN}"
           -DEXPECT_FAIL=1 "-DREGEX=${regex}" "-DCOUNT_REGEX=${once}" -DCOUNT=1
           -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
endfunction()

# An output directory that cannot be created or written: refused before step 1, not after
# training (when rank 0 used to throw while the others waited in a barrier).
function(tptrain_unwritable_dir_test name key path)
  tptrain_mpi2_fails_once(cli_unwritable_${name} "${key} = [^\n]*: cannot write there" "cannot write there"
                          train ${_decks}/valid.toml --set run.dir=${_rel}/run_${name}
                          --set checkpoint.dir=${_rel}/run_${name}/ck --set ${key}=${path})
  set_tests_properties(cli_unwritable_${name} PROPERTIES TIMEOUT 30)
endfunction()
tptrain_unwritable_dir_test(under_file checkpoint.dir ${_rel}/regular_file/ck)
tptrain_unwritable_dir_test(under_proc checkpoint.dir /proc/tptrain_ck)
tptrain_unwritable_dir_test(under_dev_null checkpoint.dir /dev/null/x)
tptrain_unwritable_dir_test(long_component checkpoint.dir ${_rel}/${_long_name}/ck)
tptrain_unwritable_dir_test(run_dir_under_file run.dir ${_rel}/regular_file/run)

# A checkpoint of another model is refused with both values named (eval and resume).
function(tptrain_other_model_test name regex)
  tptrain_mpi2_fails_once(cli_other_model_${name} "${regex}" "holds a different model" ${ARGN})
  set_tests_properties(cli_other_model_${name} PROPERTIES FIXTURES_REQUIRED small_run TIMEOUT 60)
endfunction()
set(_ck4 ${_run}/ck/step_00000004.h5)
tptrain_other_model_test(eval_more_layers "model.layers: the checkpoint has 2, the deck has 4"
                         eval ${_decks}/valid.toml --checkpoint ${_ck4} --set model.layers=4)
tptrain_other_model_test(eval_fewer_layers "model.layers: the checkpoint has 2, the deck has 1"
                         eval ${_decks}/valid.toml --checkpoint ${_ck4} --set model.layers=1)
tptrain_other_model_test(eval_heads "model.heads: the checkpoint has 4, the deck has 2"
                         eval ${_decks}/valid.toml --checkpoint ${_ck4} --set model.heads=2)
tptrain_other_model_test(generate_heads "model.heads: the checkpoint has 4, the deck has 2"
                         generate ${_decks}/valid.toml --checkpoint ${_ck4} --set model.heads=2 --prompt x)
tptrain_other_model_test(resume_layers "model.layers: the checkpoint has 2, the deck has 4"
                         train ${_decks}/valid.toml --set model.layers=4 --set checkpoint.resume=true
                         --set checkpoint.dir=${_run}/ck --set run.dir=${_rel}/resume_other)

# A model that does not fit in memory: eval and generate report it like train does (no abort).
tptrain_mpi2_fails_once(cli_too_large_eval "error[^\n]*(alloc|memory)" "tptrain: error"
                        eval ${_decks}/valid.toml --checkpoint ${_ck4} --set model.hidden=131072)
tptrain_mpi2_fails_once(cli_too_large_generate "error[^\n]*(alloc|memory)" "tptrain: error"
                        generate --prompt x ${_decks}/valid.toml --checkpoint ${_ck4} --set model.hidden=131072)
set_tests_properties(cli_too_large_eval cli_too_large_generate PROPERTIES FIXTURES_REQUIRED small_run TIMEOUT 60)

# Cases of several commands each (tests/reliability_cases.sh).
foreach(case lock diverge nan_eval stream extra_layer fp16_overflow fp16_saved_scale earlier_run)
  add_test(NAME cli_reliability_${case}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/reliability_cases.sh ${case} ${_rel}/${case}
                   ${_decks}/valid.toml ${_ck4} $<TARGET_FILE:tptrain> ${_mpi2})
  set_tests_properties(cli_reliability_${case} PROPERTIES FIXTURES_REQUIRED small_run TIMEOUT 90)
endforeach()

# fp16 loss-scale factors that would make the scale infinite (or jump across fp16's range) are
# refused by the deck, naming the key (the growth of 1e308 used to reach Inf and exit 0).
tptrain_mpi2_fails_once(cli_loss_scale_growth_1e308
                        "training.loss_scale_growth_factor = 1e\\+308: expected a number in \\(1, 1024\\]"
                        "loss_scale_growth_factor = " train ${_decks}/valid.toml --set training.precision=fp16
                        --set training.loss_scale_growth_factor=1e308 --set training.loss_scale_window=1
                        --set run.dir=${_rel}/growth_1e308 --set checkpoint.dir=${_rel}/growth_1e308/ck)
tptrain_mpi2_fails_once(cli_loss_scale_backoff_1e-300
                        "training.loss_scale_backoff_factor = 1e-300: expected a number in \\[0.0009765625, 1\\)"
                        "loss_scale_backoff_factor = " train ${_decks}/valid.toml --set training.precision=fp16
                        --set training.loss_scale_backoff_factor=1e-300
                        --set run.dir=${_rel}/backoff_1e-300 --set checkpoint.dir=${_rel}/backoff_1e-300/ck)
tptrain_mpi2_fails_once(cli_loss_scale_initial_3.7e19
                        "training.loss_scale_initial = 3.7e\\+19: expected a number in \\(0, [0-9.e+]*\\] \\(at most 2\\^64\\)"
                        "loss_scale_initial = " train ${_decks}/valid.toml --set training.precision=fp16
                        --set training.loss_scale_initial=3.7e19
                        --set run.dir=${_rel}/initial_3.7e19 --set checkpoint.dir=${_rel}/initial_3.7e19/ck)
set_tests_properties(cli_loss_scale_growth_1e308 cli_loss_scale_backoff_1e-300 cli_loss_scale_initial_3.7e19
                     PROPERTIES TIMEOUT 60)

# tptrain check reports the same directory problems without creating anything.
add_test(NAME cli_check_unwritable_dir COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tptrain>
         "-DARGS=check;${_decks}/valid.toml;--set;checkpoint.dir=/dev/null/x;--set;run.dir=${_rel}/regular_file/run"
         -DEXPECT_FAIL=1 "-DREGEX=run.dir = [^\n]*regular_file/run: cannot write there: [^\n]*regular_file is not a directory\ncheckpoint.dir = /dev/null/x: cannot write there: /dev/null is not a directory"
         -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)

# SIGUSR1/SIGTERM: the run stops after one agreed step with its checkpoint, the requeue marker and
# exit status 3, resumes bit for bit; the Slurm CPU script requeues on it, also when mpiexec
# itself got the signal and exits 1; a signal at start-up stops after step 1 (tests/signal_requeue.sh).
foreach(case usr1 term_rank0 slurm_cpu launcher_term launcher_only startup)
  add_test(NAME cli_signal_${case}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/signal_requeue.sh ${case} ${_rel}/signal_${case}
                   ${_decks}/valid.toml $<TARGET_FILE:tptrain> ${_mpi2})
  set_tests_properties(cli_signal_${case} PROPERTIES TIMEOUT 180)
endforeach()
# The same stop with checkpoint.async = true: the requeue exit waits for the background write.
add_test(NAME cli_signal_usr1_async
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/signal_requeue.sh usr1 ${_rel}/signal_usr1_async
                 ${_decks}/valid.toml $<TARGET_FILE:tptrain> ${_mpi2})
set_tests_properties(cli_signal_usr1_async PROPERTIES TIMEOUT 180 ENVIRONMENT "SIGNAL_SETS=--set checkpoint.async=true")

# metrics.jsonl: a cut last line is dropped on resume, any other bad line is refused with the
# file and the line, a write past a file size limit stops the run with the reason
# (tests/metrics_cases.sh).
foreach(case cut_line bad_line size_limit)
  add_test(NAME cli_metrics_${case}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/metrics_cases.sh ${case} ${_rel}/metrics_${case}
                   ${_decks}/valid.toml $<TARGET_FILE:tptrain> ${_mpi2})
  set_tests_properties(cli_metrics_${case} PROPERTIES TIMEOUT 180)
endforeach()

# Spike and non-finite skipping (training.skip_spikes: a planted spike skipped and resumed
# exactly, NaN gradients stopping the run at training.max_skipped_steps; spike_skipping.cmake)
# and the straggler report (a rank made slow by the test hook slow_rank named on every log line
# and in metrics.jsonl, and warned about with its host; straggler_report.cmake), on 2 ranks.
foreach(case spike_skipping straggler_report)
  add_test(NAME cli_${case}
           COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:tptrain>
                   "-DMPI2=${MPIEXEC_EXECUTABLE};${MPIEXEC_NUMPROC_FLAG};2;${TPTRAIN_MPIEXEC_FLAGS}"
                   -DDECK=${CMAKE_CURRENT_SOURCE_DIR}/data/cli/valid.toml -DDIR=${CMAKE_CURRENT_BINARY_DIR}/${case}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/${case}.cmake)
  set_tests_properties(cli_${case} PROPERTIES TIMEOUT 300)
endforeach()
