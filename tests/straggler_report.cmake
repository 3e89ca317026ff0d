# The straggler report (training.straggler_factor, src/train/straggler_report.hpp) on 2
# data-parallel ranks: with rank 1 made slow (test hook slow_rank) every log line names it, its
# step time and the median, metrics.jsonl holds step_time_max_rank / _max_s / _median_s, and
# after training.straggler_intervals slow intervals one warning names its rank and host; without
# the hook no warning.
#   cmake -DEXE=tptrain "-DMPI2=mpiexec;-n;2;flags..." -DDECK=tests/data/cli/valid.toml -DDIR=work -P straggler_report.cmake
cmake_minimum_required(VERSION 3.16)
file(REMOVE_RECURSE ${DIR})
include(${CMAKE_CURRENT_LIST_DIR}/run_command.cmake)
cmake_host_system_information(RESULT host QUERY HOSTNAME)

set(sets --set parallel.tensor=1 --set parallel.data=2 --set training.steps=8 --set training.log_interval=2
         --set training.straggler_intervals=2 --set checkpoint.resume=false)
run(ok ${MPI2} ${EXE} train ${DECK} ${sets} --set run.dir=${DIR}/slow --set checkpoint.dir=${DIR}/slow/ck
    --test-hook slow_rank=1:0.08)
string(REGEX MATCHALL "slowest rank 1 0\\.0[89][0-9]* s/step \\(median 0\\.0[0-9]+\\)" named "${output}")
list(LENGTH named n)
if(n LESS 4)
  message(FATAL_ERROR "expected every log line to name rank 1 as the slowest (~0.08 s/step), found ${n}")
endif()
string(REGEX MATCHALL "is a straggler" warnings "${output}")
list(LENGTH warnings n)
if(NOT n EQUAL 1 OR NOT output MATCHES "rank 1 \\(host [^,]+, no GPU\\) is a straggler: 0\\.0[89][0-9]* s of its own work per step against a median of [0-9.]+ s \\([0-9.]+x\\) for 2 log intervals in a row")
  message(FATAL_ERROR "expected one straggler warning naming rank 1 and its host, found ${n}")
endif()
file(STRINGS ${DIR}/slow/metrics.jsonl last REGEX "\"step\": 8,")
if(NOT last MATCHES "\"step_time_max_rank\": 1, \"step_time_max_s\": 0\\.0[89][0-9]*, \"step_time_median_s\": 0\\.0[0-9]+")
  message(FATAL_ERROR "metrics.jsonl step 8 lacks the straggler fields: ${last}")
endif()

run(ok ${MPI2} ${EXE} train ${DECK} ${sets} --set run.dir=${DIR}/even --set checkpoint.dir=${DIR}/even/ck)
if(output MATCHES "is a straggler")
  message(FATAL_ERROR "a straggler warning without a slow rank")
endif()
message(STATUS "straggler report: rank 1 named on every line and warned once; no warning when even")
