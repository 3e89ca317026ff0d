# Hugging Face export and import on a checkpoint of one layout (docs/checkpoints.md).
#   MODE=round_trip: train the deck a few steps with the layout, export the checkpoint, import the
#     export with the deck; the imported weights must be the trained ones bit for bit
#     (same_weights.py), and inspect must pass the imported file.
#   MODE=init_from: training.init_from starts from the imported weights exactly; a resume wins.
#   MODE=reference: the export evaluated by an independent PyTorch model (REF: gpt2_reference.py,
#     llama_reference.py, qwen2_reference.py, mixtral_reference.py, deepseek_v3_reference.py) gives
#     `tptrain eval`'s loss of the checkpoint within 1e-5 (fp32); skipped, saying so, without PyTorch.
#   MODE=fp8 (DeepseekV3ForCausalLM): deepseek_fp8_folder.py rewrites the export as DeepSeek publishes
#     DeepSeek-V3 (fp8 shards with their block scales, a prediction module to skip, interleaved
#     rotary rows) and as the float32 folder holding exactly those values (rotate-half rows); both
#     import to the same checkpoint bit for bit, whose eval REF gives on the float32 folder; the
#     shards without one weight's scales are refused naming the weight.
#   cmake -DMODE=... -DEXE=tptrain "-DMPI=mpiexec|flags|-n" -DRANKS=2 "-DSETS=--set|parallel.tensor=2"
#         -DPY=/usr/bin/python3 -DHF=tests/hf -DDECK=tests/hf/small.toml -DDIR=work
#         [-DREF=llama_reference "-DFIELDS=model_type=llama|num_hidden_layers=2|..."]
#         ["-DREF_ARGS=--seq-length|16"] -P hf_round_trip.cmake
# FIELDS: what config.json must hold, key=value (|-separated; a value that is not a number, true or
# false is a JSON string); GPT-2's small.toml's by default. REF_ARGS: more arguments of REF.
cmake_minimum_required(VERSION 3.16)

set(RUN_TIMEOUT 180)
include(${CMAKE_CURRENT_LIST_DIR}/../run_command.cmake)

string(REPLACE "|" ";" SETS "${SETS}")  # |-separated lists
string(REPLACE "|" ";" MPI "${MPI}")
string(REPLACE "|" ";" FIELDS "${FIELDS}")
string(REPLACE "|" ";" REF_ARGS "${REF_ARGS}")
if(NOT REF)
  set(REF gpt2_reference)
endif()
set(ck ${DIR}/ck/step_00000004.h5)
if(RANKS EQUAL 1)
  set(launch ${EXE})
else()
  set(launch ${MPI} ${RANKS} ${EXE})
endif()

# `tptrain eval`'s loss of CHECKPOINT and REF's of the Hugging Face FOLDER agree within 1e-5; skipped,
# saying so, without PyTorch. tptrain's loss in fp32 whatever precision trained it (eval reads the
# fp32 master weights), on one rank whatever layout trained it.
function(same_loss_as_reference checkpoint folder)
  execute_process(COMMAND ${PY} -c "import torch" RESULT_VARIABLE no_torch OUTPUT_QUIET ERROR_QUIET)
  if(no_torch)
    message("${REF}: skipped: PyTorch is not installed for ${PY} (Debian: python3-torch, jobs/setup-deps.sh)")
    return()
  endif()
  run(ok ${EXE} eval ${DECK} --checkpoint ${checkpoint} --windows 4 ${SETS} --set parallel.tensor=1
      --set parallel.pipeline=1 --set parallel.data=1 --set parallel.expert=1 --set training.precision=fp32)
  string(REGEX MATCH "\"eval_loss\": ([0-9.eE+-]+)" _ "${output}")
  set(tptrain_loss ${CMAKE_MATCH_1})
  run(ok ${PY} ${HF}/${REF}.py ${folder} ${HF}/../data/cli/corpus.txt --windows 4 ${REF_ARGS})
  string(REGEX MATCH "\"loss\": ([0-9.eE+-]+)" _ "${output}")
  set(reference_loss ${CMAKE_MATCH_1})
  if(tptrain_loss STREQUAL "" OR reference_loss STREQUAL "")
    message(FATAL_ERROR "no loss to compare")
  endif()
  execute_process(COMMAND awk -v a=${tptrain_loss} -v b=${reference_loss}
                          "BEGIN { d = a - b; if (d < 0) d = -d; printf \"difference %.3g\\n\", d; exit !(d <= 1e-5) }"
                  RESULT_VARIABLE differ OUTPUT_VARIABLE difference)
  message("tptrain eval ${tptrain_loss}, PyTorch reference ${reference_loss}: ${difference}")
  if(differ)
    message(FATAL_ERROR "the exported model's loss differs from tptrain's by more than 1e-5")
  endif()
endfunction()

if(MODE STREQUAL "round_trip")
  file(REMOVE_RECURSE ${DIR})
  run(ok ${launch} train ${DECK} ${SETS} --set run.dir=${DIR} --set checkpoint.dir=${DIR}/ck --set checkpoint.resume=false)
  run(ok ${EXE} export ${ck} --format hf --out ${DIR}/hf)
  if(NOT EXISTS ${DIR}/hf/model.safetensors OR NOT EXISTS ${DIR}/hf/config.json)
    message(FATAL_ERROR "export wrote no model.safetensors or config.json")
  endif()
  file(READ ${DIR}/hf/config.json config)
  set(vocab 256)
  if(SETS MATCHES "model.vocab_size=([0-9]+)")
    set(vocab ${CMAKE_MATCH_1})
  endif()
  if(NOT FIELDS)
    set(FIELDS model_type=gpt2 n_layer=2 n_embd=32 n_head=4 n_inner=128 n_positions=16 activation_function=gelu_new
               tie_word_embeddings=true)
  endif()
  foreach(pair ${FIELDS} vocab_size=${vocab})
    string(REGEX MATCH "^([^=]+)=(.*)$" _ "${pair}")
    set(key ${CMAKE_MATCH_1})
    set(value ${CMAKE_MATCH_2})
    if(value MATCHES "^([0-9.eE+-]+|true|false)$")
      set(field "\"${key}\": ${value}")
    else()
      set(field "\"${key}\": \"${value}\"")
    endif()
    string(FIND "${config}" "${field}" at)
    if(at LESS 0)
      message(FATAL_ERROR "config.json lacks ${field}:\n${config}")
    endif()
  endforeach()
  # Import under the layout too: the file does not depend on who writes it.
  run(ok ${launch} import ${DIR}/hf --deck ${DECK} ${SETS} --out ${DIR}/imported.h5)
  run(ok ${PY} ${HF}/same_weights.py ${ck} ${DIR}/imported.h5)
  run(ok ${EXE} inspect ${DIR}/imported.h5)
  if(NOT output MATCHES "every checksum verifies")
    message(FATAL_ERROR "inspect does not verify the imported checkpoint")
  endif()
elseif(MODE STREQUAL "reference")
  if(NOT EXISTS ${ck})  # the round trip was skipped (a build that does not train the model): nothing to compare
    message("${REF}: skipped: ${ck} was not trained (its round-trip test was skipped)")
    return()
  endif()
  same_loss_as_reference(${ck} ${DIR}/hf)
elseif(MODE STREQUAL "fp8")
  set(drop model.layers.1.mlp.experts.3.down_proj.weight)
  file(REMOVE_RECURSE ${DIR}/fp8 ${DIR}/f32 ${DIR}/fp8.h5 ${DIR}/f32.h5 ${DIR}/no_scale ${DIR}/no_scale.h5)
  run(ok ${PY} ${HF}/deepseek_fp8_folder.py ${DIR}/hf ${DIR}/fp8 ${DIR}/f32)
  run(ok ${EXE} import ${DIR}/fp8 --deck ${DECK} --out ${DIR}/fp8.h5)
  run(ok ${EXE} import ${DIR}/f32 --deck ${DECK} --out ${DIR}/f32.h5)
  run(ok ${PY} ${HF}/same_weights.py ${DIR}/fp8.h5 ${DIR}/f32.h5)
  same_loss_as_reference(${DIR}/fp8.h5 ${DIR}/f32)
  run(ok ${PY} ${HF}/deepseek_fp8_folder.py ${DIR}/hf ${DIR}/no_scale ${DIR}/f32 --drop-scale ${drop})
  run(fail ${EXE} import ${DIR}/no_scale --deck ${DECK} --out ${DIR}/no_scale.h5)
  if(NOT output MATCHES "tensor '${drop}' is F8_E4M3 without its block scales '${drop}_scale_inv'")
    message(FATAL_ERROR "the refusal does not name the weight without its scales")
  endif()
elseif(MODE STREQUAL "init_from")
  # training.init_from: the imported weights start a run exactly as the checkpoint they came from
  # does (the same first loss, bit for bit in the printed digits), unlike the seeded start; and a
  # checkpoint to resume from wins over init_from.
  set(one --set training.steps=1 --set training.log_interval=1 --set checkpoint.resume=false)
  foreach(start original imported seeded resumed)
    file(REMOVE_RECURSE ${DIR}/init_${start})
  endforeach()
  run(ok ${launch} train ${DECK} ${SETS} ${one} --set run.dir=${DIR}/init_original --set training.init_from=${ck})
  file(STRINGS ${DIR}/init_original/metrics.jsonl original REGEX "\"step\": 1,")
  run(ok ${launch} train ${DECK} ${SETS} ${one} --set run.dir=${DIR}/init_imported --set training.init_from=${DIR}/imported.h5)
  if(NOT output MATCHES "starting from the weights of")
    message(FATAL_ERROR "the run does not say it starts from training.init_from")
  endif()
  file(STRINGS ${DIR}/init_imported/metrics.jsonl imported REGEX "\"step\": 1,")
  run(ok ${launch} train ${DECK} ${SETS} ${one} --set run.dir=${DIR}/init_seeded)
  file(STRINGS ${DIR}/init_seeded/metrics.jsonl seeded REGEX "\"step\": 1,")
  string(REGEX MATCH "\"loss\": [^,]*" original "${original}")
  string(REGEX MATCH "\"loss\": [^,]*" imported "${imported}")
  string(REGEX MATCH "\"loss\": [^,]*" seeded "${seeded}")
  message("step 1: from the checkpoint ${original}, from its import ${imported}, seeded ${seeded}")
  if(original STREQUAL "" OR NOT original STREQUAL imported OR original STREQUAL seeded)
    message(FATAL_ERROR "expected the same first loss from the checkpoint and its import, and another one seeded")
  endif()
  file(MAKE_DIRECTORY ${DIR}/init_resumed/ck)
  file(COPY ${ck} DESTINATION ${DIR}/init_resumed/ck)
  run(ok ${launch} train ${DECK} ${SETS} --set training.steps=5 --set run.dir=${DIR}/init_resumed
      --set checkpoint.dir=${DIR}/init_resumed/ck --set checkpoint.resume=true --set training.init_from=${DIR}/imported.h5)
  if(NOT output MATCHES "resuming from .*step_00000004.h5" OR NOT output MATCHES "training.init_from = .* is not used")
    message(FATAL_ERROR "with a checkpoint to resume from, the run must resume and say init_from is not used")
  endif()
else()
  message(FATAL_ERROR "MODE must be round_trip, reference, fp8 or init_from")
endif()
