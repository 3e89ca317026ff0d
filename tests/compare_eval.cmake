# `tptrain eval` of one checkpoint with tensor = 2 (2 ranks) and tensor = 1 (1 rank): the
# checkpoint does not depend on the layout, so both losses must agree to fp32 accuracy.
execute_process(COMMAND ${MPI2} ${EXE} eval ${DECK} --checkpoint ${CKPT} --windows 4
                RESULT_VARIABLE rc2 OUTPUT_VARIABLE out2 ERROR_VARIABLE err2 TIMEOUT 60)
execute_process(COMMAND ${EXE} eval ${DECK} --checkpoint ${CKPT} --windows 4 --set parallel.tensor=1
                RESULT_VARIABLE rc1 OUTPUT_VARIABLE out1 ERROR_VARIABLE err1 TIMEOUT 60)
message("tensor = 2: ${out2}${err2}\ntensor = 1: ${out1}${err1}")
if(NOT rc2 EQUAL 0 OR NOT rc1 EQUAL 0)
  message(FATAL_ERROR "eval failed: rc ${rc2} / ${rc1}")
endif()
string(REGEX MATCH "\"eval_loss\": ([0-9.eE+-]+)" _ "${out2}")
set(loss2 ${CMAKE_MATCH_1})
string(REGEX MATCH "\"eval_loss\": ([0-9.eE+-]+)" _ "${out1}")
set(loss1 ${CMAKE_MATCH_1})
if(loss1 STREQUAL "" OR loss2 STREQUAL "")
  message(FATAL_ERROR "no eval_loss JSON line")
endif()
execute_process(COMMAND awk -v a=${loss1} -v b=${loss2}
                        "BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * a) }"
                RESULT_VARIABLE same)
if(NOT same EQUAL 0)
  message(FATAL_ERROR "eval loss differs between layouts: ${loss2} (tensor 2) vs ${loss1} (tensor 1)")
endif()
