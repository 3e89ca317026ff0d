# A job SIGKILLed in the middle of writing a checkpoint: the previous checkpoint stays intact,
# the next run resumes from it, and its loss curve equals the run that was never interrupted.
# Arguments: MPI2 (mpiexec ... -n 2 ...), EXE, DECK, DIR; optional EXTRA (more arguments of every
# run, a list) and LOADS_ELSEWHERE (the uninterrupted run's step-4 checkpoint also resumes under
# optimizer.shard = "optimizer" on the same ranks and on one plain rank, their steps 5 and 6 the
# uninterrupted run's within 1e-5: sharded parameters' checkpoints are layout-free).
set(common train ${DECK} --set checkpoint.interval=2 --set checkpoint.resume=true
    --set training.log_interval=1 --set training.steps=6 ${EXTRA})
file(REMOVE_RECURSE ${DIR})

execute_process(COMMAND ${MPI2} ${EXE} ${common} --set run.dir=${DIR}/ref --set checkpoint.dir=${DIR}/ref/ck
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "uninterrupted run failed (${rc}):\n${out}${err}")
endif()

set(run --set run.dir=${DIR}/run --set checkpoint.dir=${DIR}/run/ck)
execute_process(COMMAND ${MPI2} ${EXE} ${common} ${run} --test-hook kill_in_checkpoint=4
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
message("killed run (rc ${rc}):\n${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the run should have been killed while writing step 4")
endif()
if(NOT EXISTS ${DIR}/run/ck/step_00000002.h5 OR EXISTS ${DIR}/run/ck/step_00000004.h5)
  message(FATAL_ERROR "expected step 2 complete and no complete step 4 after the kill")
endif()

execute_process(COMMAND ${MPI2} ${EXE} ${common} ${run}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
message("resumed run (rc ${rc}):\n${out}${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "resuming from [^\n]*step_00000002.h5")
  message(FATAL_ERROR "the second run did not resume from step 2")
endif()

# Loss of every step, as written (17 significant digits), must be identical.
set(others "")
if(LOADS_ELSEWHERE)
  foreach(other optimizer one_rank)
    file(REMOVE_RECURSE ${DIR}/${other})
    file(MAKE_DIRECTORY ${DIR}/${other}/ck)
    file(COPY ${DIR}/ref/ck/step_00000004.h5 DESTINATION ${DIR}/${other}/ck)
    set(where --set run.dir=${DIR}/${other} --set checkpoint.dir=${DIR}/${other}/ck)
    if(other STREQUAL "optimizer")
      set(launch ${MPI2} ${EXE} ${common} ${where} --set optimizer.shard=optimizer)
    else()
      set(launch ${EXE} ${common} ${where} --set parallel.data=1 --set optimizer.shard=none)
    endif()
    execute_process(COMMAND ${launch} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
    message("resumed under ${other} (rc ${rc}):\n${out}${err}")
    if(NOT rc EQUAL 0 OR NOT out MATCHES "resuming from [^\n]*step_00000004.h5")
      message(FATAL_ERROR "the checkpoint did not resume under ${other}")
    endif()
    list(APPEND others ${other})
  endforeach()
endif()
foreach(which ref run ${others})
  file(STRINGS ${DIR}/${which}/metrics.jsonl lines)
  set(${which}_losses "")
  foreach(line IN LISTS lines)
    string(REGEX MATCH "\"step\": ([0-9]+), \"loss\": ([^,]+)," _ "${line}")
    list(APPEND ${which}_losses "${CMAKE_MATCH_1}:${CMAKE_MATCH_2}")
  endforeach()
endforeach()
message("uninterrupted: ${ref_losses}\nkilled+resumed: ${run_losses}")
list(LENGTH ref_losses n)
if(NOT n EQUAL 6 OR NOT ref_losses STREQUAL run_losses)
  message(FATAL_ERROR "the resumed loss curve differs from the uninterrupted one")
endif()
foreach(other IN LISTS others)
  message("resumed under ${other}: ${${other}_losses}")
  foreach(step 5 6)
    string(REGEX MATCH "(^|;)${step}:([^;]+)" _ "${ref_losses}")
    set(a ${CMAKE_MATCH_2})
    string(REGEX MATCH "(^|;)${step}:([^;]+)" _ "${${other}_losses}")
    set(b ${CMAKE_MATCH_2})
    execute_process(COMMAND awk -v a=${a} -v b=${b} "BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != \"\" && d <= 1e-5 * a) }"
                    RESULT_VARIABLE same)
    if(NOT same EQUAL 0)
      message(FATAL_ERROR "step ${step} resumed under ${other}: loss ${b}, the uninterrupted run's ${a}")
    endif()
  endforeach()
endforeach()
