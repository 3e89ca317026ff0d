# Tests of the tptrain executable itself: deck errors through `tptrain check`, and a world size
# that does not match the deck (every rank must exit non-zero, quickly, with one message).
set(_decks ${CMAKE_CURRENT_SOURCE_DIR}/data/cli)

add_test(NAME cli_version COMMAND tptrain --version)
set_tests_properties(cli_version PROPERTIES PASS_REGULAR_EXPRESSION "tptrain [0-9]+\\.[0-9]+")

# docs/cli.md's usage names every subcommand and option of `--help`, and no other option; the
# self-test drops a usage line, as a doc that fell behind a new option would.
add_test(NAME cli_docs COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:tptrain> -DDOC=${PROJECT_SOURCE_DIR}/docs/cli.md
         -P ${CMAKE_CURRENT_SOURCE_DIR}/cli_docs.cmake)
add_test(NAME cli_docs_selftest COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:tptrain>
         -DDOC=${PROJECT_SOURCE_DIR}/docs/cli.md "-DDROP=segment-bytes" -P ${CMAKE_CURRENT_SOURCE_DIR}/cli_docs.cmake)
set_tests_properties(cli_docs_selftest PROPERTIES
                     PASS_REGULAR_EXPRESSION "tptrain tokenize: --segment-bytes \\(in --help\\) is not on the usage lines")

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

# End to end on 2 ranks: train the small fixture deck, then evaluate its final checkpoint with
# tensor = 2 and with tensor = 1 (resharding on load): the two losses must agree, and generate.
set(_run ${CMAKE_CURRENT_BINARY_DIR}/cli_run)
set(_mpi2 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${TPTRAIN_MPIEXEC_FLAGS})
set(_sets --set run.dir=${_run} --set checkpoint.dir=${_run}/ck --set checkpoint.resume=false
          --set checkpoint.overwrite=true)  # a fresh run each time the suite runs
add_test(NAME cli_train_small COMMAND ${CMAKE_COMMAND} -E env OPENBLAS_NUM_THREADS=1
         ${_mpi2} $<TARGET_FILE:tptrain> train ${_decks}/valid.toml ${_sets})
set_tests_properties(cli_train_small PROPERTIES FIXTURES_SETUP small_run TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "measured Kokkos allocations of this rank: [0-9.]+ MiB, peak [0-9.]+ MiB; by category, MiB: weights [0-9.]+.*checkpoint .*step_00000004.h5 written.*memory at the end: measured")
add_test(NAME cli_eval_reshard
         COMMAND ${CMAKE_COMMAND} "-DMPI2=${_mpi2}" -DEXE=$<TARGET_FILE:tptrain>
                 -DDECK=${_decks}/valid.toml -DCKPT=${_run}/ck/step_00000004.h5
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/compare_eval.cmake)
set_tests_properties(cli_eval_reshard PROPERTIES FIXTURES_REQUIRED small_run TIMEOUT 120)
# stdout is the sample alone, the same for the same seed; the log goes to stderr
# (tests/generate_stdout.cmake).
add_test(NAME cli_generate
         COMMAND ${CMAKE_COMMAND} "-DCMD=${_mpi2};$<TARGET_FILE:tptrain>;generate;${_decks}/valid.toml;--checkpoint;${_run}/ck/step_00000004.h5;--prompt;It is;--tokens;16;--seed;3"
                 "-DPROMPT=It is" -P ${CMAKE_CURRENT_SOURCE_DIR}/generate_stdout.cmake)
set_tests_properties(cli_generate PROPERTIES FIXTURES_REQUIRED small_run TIMEOUT 120)

# Every metrics record ends with the measured memory (docs/design.md, "Memory accounting").
add_test(NAME cli_metrics_memory COMMAND ${CMAKE_COMMAND} -E cat ${_run}/metrics.jsonl)
set_tests_properties(cli_metrics_memory PROPERTIES FIXTURES_REQUIRED small_run TIMEOUT 30
                     PASS_REGULAR_EXPRESSION "\"step\": 4, .*\"mem_weights_bytes\": [1-9][0-9]*, \"mem_gradients_bytes\": [1-9][0-9]*, \"mem_optimizer_state_bytes\": [1-9][0-9]*, \"mem_activations_bytes\": [1-9][0-9]*, \"mem_workspace_bytes\": [1-9][0-9]*, \"mem_communication_bytes\": [0-9]+, \"mem_checkpoint_bytes\": [0-9]+, \"mem_other_bytes\": [0-9]+, \"mem_peak_bytes\": [1-9][0-9]*, \"mem_peak_bytes_max_rank\": [1-9][0-9]*, \"mem_rss_bytes\": [1-9][0-9]*, \"mem_peak_rss_bytes\": [1-9][0-9]*, \"mem_peak_rss_bytes_max_rank\": [1-9][0-9]*}")

# The analysis scripts on the small run: loss curves to a PNG, per-layer weight statistics.
add_test(NAME cli_plot_metrics COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/io/plot_metrics.py
         ${_run} -o ${_run}/metrics.png)
set_tests_properties(cli_plot_metrics PROPERTIES FIXTURES_REQUIRED small_run TIMEOUT 120)
add_test(NAME cli_checkpoint_stats COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/io/checkpoint_stats.py
         --verify ${_run}/ck/step_00000004.h5)
set_tests_properties(cli_checkpoint_stats PROPERTIES FIXTURES_REQUIRED small_run TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "layers/1")
add_test(NAME cli_inspect COMMAND tptrain inspect ${_run}/ck/step_00000004.h5)
set_tests_properties(cli_inspect PROPERTIES FIXTURES_REQUIRED small_run TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "every checksum verifies")

# SIGKILL during a checkpoint write, then resume: same loss curve as the uninterrupted run.
add_test(NAME cli_kill_and_resume
         COMMAND ${CMAKE_COMMAND} "-DMPI2=${_mpi2}" -DEXE=$<TARGET_FILE:tptrain>
                 -DDECK=${_decks}/valid.toml -DDIR=${CMAKE_CURRENT_BINARY_DIR}/kill_run
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/kill_resume.cmake)
set_tests_properties(cli_kill_and_resume PROPERTIES TIMEOUT 300)
# The same under sharded parameters (ZeRO-3, data 2), and its checkpoint resumed under ZeRO-1 and
# on one plain rank.
add_test(NAME cli_kill_and_resume_sharded_parameters
         COMMAND ${CMAKE_COMMAND} "-DMPI2=${_mpi2}" -DEXE=$<TARGET_FILE:tptrain>
                 -DDECK=${_decks}/valid.toml -DDIR=${CMAKE_CURRENT_BINARY_DIR}/kill_run_zero3
                 "-DEXTRA=--set;parallel.tensor=1;--set;parallel.data=2;--set;optimizer.shard=parameters"
                 -DLOADS_ELSEWHERE=ON -P ${CMAKE_CURRENT_SOURCE_DIR}/kill_resume.cmake)
set_tests_properties(cli_kill_and_resume_sharded_parameters PROPERTIES TIMEOUT 300)

# checkpoint.async: the same files as synchronous writes under every layout kind, one write in
# flight, SIGKILL at three points of a background write, a failed one (tests/async_checkpoint.py).
add_test(NAME cli_async_checkpoint
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/async_checkpoint.py $<TARGET_FILE:tptrain>
                 ${CMAKE_CURRENT_BINARY_DIR}/async_checkpoint ${CMAKE_CURRENT_SOURCE_DIR}/data/cli
                 ${MPIEXEC_EXECUTABLE} ${TPTRAIN_MPIEXEC_FLAGS})
set_tests_properties(cli_async_checkpoint PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 ENVIRONMENT "${TPTRAIN_TEST_ENV}")

# `tptrain bench --phases` on 2 ranks with a deck that has no [data]: the report and exactly one
# JSON line with MFU and every phase; `--steps 0` is a usage error.
add_test(NAME cli_bench_tensor2
         COMMAND ${CMAKE_COMMAND} -DCMD=${MPIEXEC_EXECUTABLE}
         "-DARGS=${MPIEXEC_NUMPROC_FLAG};2;${TPTRAIN_MPIEXEC_FLAGS};$<TARGET_FILE:tptrain>;bench;${_decks}/bench.toml;--steps;2;--warmup;1;--phases"
         "-DREGEX=MFU: [0-9.]+ % of the GEMM peak.*\\{\"bench\": \"bench\", \"ranks\": 2, \"tensor\": 2.*\"mfu\": 0\\.[0-9]+.*\"phases\": true, \"phases_s\": \\{.*\"tp_comm\": [0-9].*\"phases_step_s\": [0-9]"
         "-DCOUNT_REGEX=\\{\"bench\":" -DCOUNT=1 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set_tests_properties(cli_bench_tensor2 PROPERTIES TIMEOUT 60)
# Without --phases the bench is fenced at step boundaries only and says so: "phases": false, no
# phase times, and HFU above MFU (recompute = "selective" recomputes Q Kᵀ in every backward).
add_test(NAME cli_bench_unfenced COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tptrain>
         "-DARGS=bench;${_decks}/bench.toml;--set;parallel.tensor=1;--steps;1;--warmup;0"
         "-DREGEX=fenced at step boundaries only.*step time by phase: not measured.*\"recompute_flops_per_step\": [1-9].*\"phases\": false\\}"
         "-DCOUNT_REGEX=phases_s" -DCOUNT=0 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set_tests_properties(cli_bench_unfenced PROPERTIES TIMEOUT 60)
# Launch counts (docs/design.md, "Launch budget") on the device's attention path, tensor 2: kernels
# and BLAS calls per step and per layer, and the tensor-parallel collectives counted apart.
add_test(NAME cli_bench_launches
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${TPTRAIN_MPIEXEC_FLAGS} $<TARGET_FILE:tptrain> bench
                 ${_decks}/bench.toml --steps 1 --warmup 0 --attention batched)
set_tests_properties(cli_bench_launches PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION
  "launches per layer: forward [0-9.]+ \\+ [0-9.]+ BLAS.*\"launches\": \\{\"attention_path\": \"batched\", \"per_step\": \\{\"kernels\": [1-9][0-9]*, \"blas\": [1-9][0-9]*, \"kernels_and_blas\": [1-9][0-9]*, \"collectives\": [1-9][0-9]*\\}, \"per_layer_forward\": \\{\"kernels\": [1-9][0-9.]*, \"blas\": [1-9][0-9.]*, \"kernels_and_blas\": [1-9][0-9.]*, \"collectives\": [1-9]")
# Interleaved 1F1B in bench with the fixed-time test hook (docs/planning.md, "The bubble,
# measured"): the bubble (p - 1)/(v m) = 1/4, the predicted and measured step, in the JSON too.
add_test(NAME cli_bench_virtual_stages_hook
         COMMAND ${CMAKE_COMMAND} -DCMD=${MPIEXEC_EXECUTABLE}
         "-DARGS=${MPIEXEC_NUMPROC_FLAG};2;${TPTRAIN_MPIEXEC_FLAGS};$<TARGET_FILE:tptrain>;bench;${_decks}/bench.toml;--set;parallel.tensor=1;--set;parallel.pipeline=2;--set;model.layers=4;--set;parallel.virtual_stages=2;--steps;1;--warmup;0;--test-hook;layer_seconds=0.01"
         "-DREGEX=pipeline: 2 stages x 2 virtual stages, 2 micro-batches: bubble \\(p - 1\\)/\\(v m\\) = 25\\.0 %; with the test hook layer_seconds = 0\\.01: predicted step 0\\.1500 s = 0\\.1200 s x \\(1 \\+ bubble\\), measured [0-9.]+ s.*\"virtual_stages\": 2, \"pipeline_bubble\": 0\\.25,"
         -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set_tests_properties(cli_bench_virtual_stages_hook PROPERTIES TIMEOUT 60)
# bench --calibrate (the machine file: every key of the schema, in its type) and bench --trace (a
# strict-JSON Chrome trace with the spans of tensor and interleaved-pipeline layouts) on
# input/bench/tiny.toml, 1 and 2 ranks; plan --machine reads the file; unwritable paths named
# (tests/bench_calibrate_trace.py). About 50 s on 2 idle cores: each calibration times every GEMM
# shape of the standard models (147) for a minimum time. To shrink: calibrate the deck's own
# shapes only in the test, or share one calibration between the checks.
add_test(NAME cli_bench_calibrate_trace
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/bench_calibrate_trace.py $<TARGET_FILE:tptrain>
                 ${CMAKE_CURRENT_BINARY_DIR}/bench_calibrate_trace ${PROJECT_SOURCE_DIR}
                 ${MPIEXEC_EXECUTABLE} ${TPTRAIN_MPIEXEC_FLAGS})
# It measures (the host's share of a collective among them): alone, not beside another test.
set_tests_properties(cli_bench_calibrate_trace PROPERTIES TIMEOUT 300 ENVIRONMENT "${TPTRAIN_TEST_ENV}" RUN_SERIAL TRUE)
# --kokkos-* flags reach Kokkos::initialize (its help text) and the job still runs.
add_test(NAME cli_kokkos_flags COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tptrain>
         "-DARGS=bench;${_decks}/bench.toml;--set;parallel.tensor=1;--kokkos-help;--steps;1;--warmup;0"
         "-DREGEX=Kokkos command line arguments.*\\{\"bench\": \"bench\", \"ranks\": 1"
         -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set_tests_properties(cli_kokkos_flags PROPERTIES TIMEOUT 60)
add_test(NAME cli_bench_zero_steps COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tptrain>
         "-DARGS=bench;${_decks}/bench.toml;--steps;0" -DEXPECT_FAIL=1
         "-DREGEX=--steps: expected a positive integer" -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)

# input/deepseek-v3-tiny.toml trains on 2 ranks (data 2 x expert 2) on the test corpus: its log
# carries the multi-token prediction module's loss; its checkpoint samples through generation's
# latent cache.
set(_run_deepseek ${CMAKE_CURRENT_BINARY_DIR}/cli_run_deepseek)
set(_deepseek_sets --set data.train=${_decks}/corpus.txt --set data.valid=${_decks}/corpus_valid.txt
                   --set model.seq_length=32 --set training.micro_batch=2 --set training.global_batch=4
                   --set training.log_interval=2 --set training.eval_interval=0 --set optimizer.warmup_steps=1
                   --set checkpoint.interval=4 --set run.dir=${_run_deepseek} --set checkpoint.dir=${_run_deepseek}/ck)
add_test(NAME cli_train_deepseek_v3_tiny COMMAND ${CMAKE_COMMAND} -E env OPENBLAS_NUM_THREADS=1
         ${_mpi2} $<TARGET_FILE:tptrain> train ${PROJECT_SOURCE_DIR}/input/deepseek-v3-tiny.toml ${_deepseek_sets}
         --set training.steps=4 --set checkpoint.resume=false --set checkpoint.overwrite=true)
set_tests_properties(cli_train_deepseek_v3_tiny PROPERTIES FIXTURES_SETUP deepseek_run TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "mtp loss [0-9.]+.*step_00000004.h5 written")
add_test(NAME cli_generate_deepseek_v3_tiny
         COMMAND ${CMAKE_COMMAND} "-DCMD=${_mpi2};$<TARGET_FILE:tptrain>;generate;${PROJECT_SOURCE_DIR}/input/deepseek-v3-tiny.toml;${_deepseek_sets};--checkpoint;${_run_deepseek}/ck/step_00000004.h5;--prompt;It is;--tokens;8;--seed;3"
                 "-DPROMPT=It is" -P ${CMAKE_CURRENT_SOURCE_DIR}/generate_stdout.cmake)
set_tests_properties(cli_generate_deepseek_v3_tiny PROPERTIES FIXTURES_REQUIRED deepseek_run TIMEOUT 120)

# Mixed precision end to end on 2 ranks (tensor 2): bf16 trains and writes fp32 master weights
# with the precision attribute; fp32 evaluates that checkpoint and bf16 generates from it; fp16
# logs its loss scale; bench reports 18 bytes per parameter in bf16 and the measured memory.
set(_run_bf16 ${CMAKE_CURRENT_BINARY_DIR}/cli_run_bf16)
add_test(NAME cli_train_bf16 COMMAND ${CMAKE_COMMAND} -E env OPENBLAS_NUM_THREADS=1
         ${_mpi2} $<TARGET_FILE:tptrain> train ${_decks}/valid.toml --set training.precision=bf16
         --set run.dir=${_run_bf16} --set checkpoint.dir=${_run_bf16}/ck --set checkpoint.resume=false --set checkpoint.overwrite=true)
set_tests_properties(cli_train_bf16 PROPERTIES FIXTURES_SETUP bf16_run TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "18 bytes each \\(bf16 weights 2, fp32 master 4.*checkpoint .*step_00000004.h5 written")
# Memory at scale from the command line: sequence parallelism with full recomputation trains,
# says so at start-up, and its checkpoint evaluates and samples in a plain layout (eval below).
set(_run_sp ${CMAKE_CURRENT_BINARY_DIR}/cli_run_sp)
add_test(NAME cli_train_sequence_parallel_full_recompute COMMAND ${CMAKE_COMMAND} -E env OPENBLAS_NUM_THREADS=1
         ${_mpi2} $<TARGET_FILE:tptrain> train ${_decks}/valid.toml --set parallel.tensor=2
         --set parallel.sequence_parallel=true --set training.recompute=full
         --set run.dir=${_run_sp} --set checkpoint.dir=${_run_sp}/ck --set checkpoint.resume=false --set checkpoint.overwrite=true)
set_tests_properties(cli_train_sequence_parallel_full_recompute PROPERTIES FIXTURES_SETUP sp_run TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "recompute = full, sequence parallel\\).*checkpoint .*step_00000004.h5 written")
# The sample's "It is" anywhere: stdout (the sample) and stderr (the log) reach ctest through
# mpiexec as one stream, in no fixed order (cli_generate holds stdout apart).
add_test(NAME cli_generate_sequence_parallel COMMAND ${_mpi2} $<TARGET_FILE:tptrain> generate ${_decks}/valid.toml
         --set parallel.tensor=2 --set parallel.sequence_parallel=true --checkpoint ${_run_sp}/ck/step_00000004.h5
         --prompt "It is" --tokens 8)
set_tests_properties(cli_generate_sequence_parallel PROPERTIES FIXTURES_REQUIRED sp_run TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "It is")
add_test(NAME cli_eval_bf16_checkpoint_in_fp32 COMMAND ${_mpi2} $<TARGET_FILE:tptrain> eval ${_decks}/valid.toml
         --checkpoint ${_run_bf16}/ck/step_00000004.h5)
set_tests_properties(cli_eval_bf16_checkpoint_in_fp32 PROPERTIES FIXTURES_REQUIRED bf16_run TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "\"eval_loss\": [0-9]")
add_test(NAME cli_generate_bf16 COMMAND ${_mpi2} $<TARGET_FILE:tptrain> generate ${_decks}/valid.toml
         --set training.precision=bf16 --checkpoint ${_run_bf16}/ck/step_00000004.h5 --prompt "It is" --tokens 8)
set_tests_properties(cli_generate_bf16 PROPERTIES FIXTURES_REQUIRED bf16_run TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "It is")
add_test(NAME cli_inspect_bf16 COMMAND tptrain inspect ${_run_bf16}/ck/step_00000004.h5)
set_tests_properties(cli_inspect_bf16 PROPERTIES FIXTURES_REQUIRED bf16_run TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "precision *\"bf16\".*every checksum verifies")
# The distributed optimizer end to end on 2 ranks (data 2, bf16): the memory line shows the
# sharded optimizer state (6 + 12/2 = 12 bytes per parameter), and the checkpoint that both data
# ranks wrote their parts of evaluates the same in plain runs under tensor 2 and tensor 1.
set(_run_zero ${CMAKE_CURRENT_BINARY_DIR}/cli_run_zero)
add_test(NAME cli_train_distributed_optimizer COMMAND ${CMAKE_COMMAND} -E env OPENBLAS_NUM_THREADS=1
         ${_mpi2} $<TARGET_FILE:tptrain> train ${_decks}/valid.toml --set parallel.tensor=1 --set parallel.data=2
         --set optimizer.distributed=true --set training.precision=bf16
         --set run.dir=${_run_zero} --set checkpoint.dir=${_run_zero}/ck --set checkpoint.resume=false --set checkpoint.overwrite=true)
set_tests_properties(cli_train_distributed_optimizer PROPERTIES FIXTURES_SETUP zero_run TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "12 bytes each \\(bf16 weights 2, fp32 master 2, fp32 gradients 4, AdamW moments 4; distributed optimizer: master and moments sharded over 2 data-parallel ranks.*step_00000004.h5 written.*gradient reduce-scatter")
add_test(NAME cli_eval_distributed_optimizer_checkpoint
         COMMAND ${CMAKE_COMMAND} "-DMPI2=${_mpi2}" -DEXE=$<TARGET_FILE:tptrain>
                 -DDECK=${_decks}/valid.toml -DCKPT=${_run_zero}/ck/step_00000004.h5
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/compare_eval.cmake)
set_tests_properties(cli_eval_distributed_optimizer_checkpoint PROPERTIES FIXTURES_REQUIRED zero_run TIMEOUT 120)
set(_run_fp16 ${CMAKE_CURRENT_BINARY_DIR}/cli_run_fp16)
add_test(NAME cli_train_fp16 COMMAND ${CMAKE_COMMAND} -E env OPENBLAS_NUM_THREADS=1
         ${_mpi2} $<TARGET_FILE:tptrain> train ${_decks}/valid.toml --set training.precision=fp16
         --set run.dir=${_run_fp16} --set checkpoint.dir=${_run_fp16}/ck --set checkpoint.resume=false --set checkpoint.overwrite=true)
set_tests_properties(cli_train_fp16 PROPERTIES TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "\\| loss scale [0-9.e+]+ \\| skipped [0-9]+")
add_test(NAME cli_bench_bf16
         COMMAND ${CMAKE_COMMAND} -DCMD=${MPIEXEC_EXECUTABLE}
         "-DARGS=${MPIEXEC_NUMPROC_FLAG};2;${TPTRAIN_MPIEXEC_FLAGS};$<TARGET_FILE:tptrain>;bench;${_decks}/bench.toml;--set;training.precision=bf16;--steps;1;--warmup;1"
         "-DREGEX=\"precision\": \"bf16\", \"recompute\": \"selective\", \"sequence_parallel\": false, \"memory\": \\{\"weights\": [0-9]+, \"master_weights\": [0-9]+.*\"bytes_per_parameter\": 18, \"mem_weights_bytes\": [1-9][0-9]*, .*\"mem_activations_peak_bytes\": [1-9][0-9]*, .*\"mem_peak_bytes_max_rank\": [1-9][0-9]*, .*\"mem_peak_rss_bytes_max_rank\": [1-9][0-9]*\\}"
         -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set_tests_properties(cli_bench_bf16 PROPERTIES TIMEOUT 60)
# Two runs on one figure (how fp32 and bf16 curves are compared).
add_test(NAME cli_plot_metrics_two_runs COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/io/plot_metrics.py
         ${_run} ${_run_bf16} --label fp32 --label bf16 -o ${_run_bf16}/fp32_vs_bf16.png)
set_tests_properties(cli_plot_metrics_two_runs PROPERTIES FIXTURES_REQUIRED "small_run;bf16_run" TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "records of .*cli_run_bf16/metrics.jsonl")
