# An import that must fail, saying why: a copy of a Hugging Face export damaged one way
# (hostile_hf.py KIND) is imported with the deck; the import must exit non-zero and its output
# match EXPECT (a regex naming the field or tensor). With -DACCEPTED=1 the variant is a model
# tptrain computes and the import must succeed instead.
#   cmake -DEXE=tptrain -DPY=/usr/bin/python3 -DHF=tests/hf -DDECK=deck.toml -DSRC=export_dir
#         -DDIR=work -DKIND=mixtral_expert_missing "-DEXPECT=no model\\.layers\\.1\\..*w2" -P hf_import_refused.cmake
cmake_minimum_required(VERSION 3.16)

include(${CMAKE_CURRENT_LIST_DIR}/../run_command.cmake)

if(NOT EXISTS ${SRC}/model.safetensors)
  message(FATAL_ERROR "no export in ${SRC} (its round-trip test did not run)")
endif()
file(REMOVE_RECURSE ${DIR}/${KIND} ${DIR}/${KIND}.h5)
run(ok ${PY} ${HF}/hostile_hf.py ${SRC} ${DIR}/${KIND} ${KIND})
if(ACCEPTED)
  run(ok ${EXE} import ${DIR}/${KIND} --deck ${DECK} --out ${DIR}/${KIND}.h5)
  return()
endif()
run(fail ${EXE} import ${DIR}/${KIND} --deck ${DECK} --out ${DIR}/${KIND}.h5)
if(NOT output MATCHES "${EXPECT}")
  message(FATAL_ERROR "the refusal does not say '${EXPECT}'")
endif()
if(EXISTS ${DIR}/${KIND}.h5)
  message(FATAL_ERROR "a refused import left ${DIR}/${KIND}.h5 behind")
endif()
