# Spike and non-finite skipping (training.skip_spikes, src/train/spike_detector.hpp) on 2 ranks:
# a planted gradient spike (test hook spike_at_step) is skipped, logged and marked
# "skipped": true, and the run goes on; a run resumed from the checkpoint before the spike
# judges as the uninterrupted run does (the detector's window is in the checkpoint), loss for
# loss; NaN gradients from a step on stop the run at training.max_skipped_steps skips in a row
# with exit 1, keeping the checkpoints before them. The spike runs shard parameters over data 2
# (ZeRO-3: the norm summed from gradient shards, a skipped step leaving the weight shards as they
# were); the NaN runs keep the deck's tensor 2.
#   cmake -DEXE=tptrain "-DMPI2=mpiexec;-n;2;flags..." -DDECK=tests/data/cli/valid.toml -DDIR=work -P spike_skipping.cmake
cmake_minimum_required(VERSION 3.16)
file(REMOVE_RECURSE ${DIR})
include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)

set(sets --set training.steps=10 --set training.log_interval=1 --set training.skip_spikes=true
         --set training.spike_window=4 --set checkpoint.interval=5 --set checkpoint.resume=true)
set(zero3 --set parallel.tensor=1 --set parallel.data=2 --set optimizer.shard=parameters)
run(ok ${MPI2} ${EXE} train ${DECK} ${sets} ${zero3} --set run.dir=${DIR}/whole --set checkpoint.dir=${DIR}/whole/ck
    --test-hook spike_at_step=8)
if(NOT output MATCHES "step 8: skipped \\(1 in a row, training.max_skipped_steps = 10\\), the weights are not updated: the gradient norm [0-9.]+ is [0-9.]+ standard deviations above the mean")
  message(FATAL_ERROR "the planted spike at step 8 was not skipped with its reason")
endif()
file(STRINGS ${DIR}/whole/metrics.jsonl skipped_lines REGEX "\"skipped\": true")
list(LENGTH skipped_lines n)
if(NOT n EQUAL 1 OR NOT skipped_lines MATCHES "^\\{\"step\": 8,")
  message(FATAL_ERROR "expected one record marked skipped, step 8; got ${n}: ${skipped_lines}")
endif()
file(STRINGS ${DIR}/whole/metrics.jsonl last REGEX "\"step\": 10,")
if(NOT last)
  message(FATAL_ERROR "the run did not go on to step 10 after the skipped step")
endif()

# The checkpoint of step 5, resumed elsewhere: steps 6..10, the skip included, as the whole run.
file(MAKE_DIRECTORY ${DIR}/resumed/ck)
file(COPY ${DIR}/whole/ck/step_00000005.h5 DESTINATION ${DIR}/resumed/ck)
run(ok ${MPI2} ${EXE} train ${DECK} ${sets} ${zero3} --set run.dir=${DIR}/resumed --set checkpoint.dir=${DIR}/resumed/ck
    --test-hook spike_at_step=8)
if(output MATCHES "no spike-detector window")
  message(FATAL_ERROR "the checkpoint held no spike-detector window")
endif()
foreach(run whole resumed)
  metrics_steps(${run}_losses ${DIR}/${run}/metrics.jsonl "\"step\": ([6-9]|10),"
                "\"step\": [0-9]+, \"loss\": [-0-9.e]+, \"lr\": [-0-9.e]+, \"grad_norm\": [-0-9.e]+")
endforeach()
list(LENGTH whole_losses n)
if(NOT n EQUAL 5 OR NOT whole_losses STREQUAL resumed_losses)
  message(FATAL_ERROR "steps 6..10: the whole run gave [${whole_losses}], the resumed one [${resumed_losses}]")
endif()

# NaN gradients from step 5 on: skipped, then the run stops at the third in a row.
run(fail ${MPI2} ${EXE} train ${DECK} ${sets} --set checkpoint.interval=2 --set training.max_skipped_steps=3
    --set run.dir=${DIR}/nan --set checkpoint.dir=${DIR}/nan/ck --test-hook nonfinite_from_step=5)
if(NOT output MATCHES "step 7: 3 steps in a row were skipped \\(training.max_skipped_steps = 3\\), the last because the loss is [0-9.]+ and the gradient norm nan: not finite: stopping the run")
  message(FATAL_ERROR "NaN gradients: no stop at the third skip in a row")
endif()
if(NOT EXISTS ${DIR}/nan/ck/step_00000004.h5 OR EXISTS ${DIR}/nan/ck/step_00000008.h5)
  message(FATAL_ERROR "NaN gradients: expected the checkpoints up to step 6 and none after the stop")
endif()
message(STATUS "spike skipping: a planted spike skipped, resumed exactly; NaN gradients stop the run at the limit")
