# Deck and command-line validation through the tptrain executable (uses _decks from cli_tests.cmake).
# Every test has a TIMEOUT: an input that is read forever (a FIFO, /dev/zero) must fail, not hang.

# Non-zero exit and output matching `regex`, within 30 s.
function(tptrain_expect_fail name regex)
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tptrain> "-DARGS=${ARGN}"
           -DEXPECT_FAIL=1 "-DREGEX=${regex}" -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
  set_tests_properties(${name} PROPERTIES TIMEOUT 30)
endfunction()

# Inputs that never end are refused before they are read.
tptrain_expect_fail(cli_check_dev_zero "/dev/zero: cannot read deck file: it is not a regular file"
                    check /dev/zero)
tptrain_expect_fail(cli_check_dev_urandom "/dev/urandom: cannot read deck file: it is not a regular file"
                    check /dev/urandom)
# A FIFO as the deck and as its data file, made in a fresh folder by the shell.
set(_fifo_dir ${CMAKE_CURRENT_BINARY_DIR}/cli_fifo)
foreach(what deck data)
  if(what STREQUAL "deck")
    set(_script "mkfifo ${_fifo_dir}/deck/deck.toml && exec $<TARGET_FILE:tptrain> check ${_fifo_dir}/deck/deck.toml")
    set(_regex "deck.toml: cannot read deck file: it is not a regular file \\(a FIFO\\)")
  else()
    set(_script "mkfifo ${_fifo_dir}/data/train.txt && printf '[data]\\ntrain = \"train.txt\"\\n' > ${_fifo_dir}/data/deck.toml && exec $<TARGET_FILE:tptrain> check ${_fifo_dir}/data/deck.toml")
    set(_regex "data\\.train = \"train\\.txt\": .*train\\.txt is not a regular file \\(a FIFO\\)")
  endif()
  add_test(NAME cli_check_fifo_${what}
           COMMAND ${CMAKE_COMMAND} -DCMD=/bin/sh
                   "-DARGS=-c;rm -rf ${_fifo_dir}/${what} && mkdir -p ${_fifo_dir}/${what} && ${_script}"
                   -DEXPECT_FAIL=1 "-DREGEX=${_regex}" -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
  set_tests_properties(cli_check_fifo_${what} PROPERTIES TIMEOUT 30)
endforeach()
# The Catch2 cases with FIFOs and devices (load_deck, data files, TokenDataset::open), bounded.
add_test(NAME deck_nonregular_inputs COMMAND tptrain_tests "[nonregular]")
set_tests_properties(deck_nonregular_inputs PROPERTIES TIMEOUT 30)
# A deck over 1 MiB: its size and the limit, before it is read.
add_test(NAME cli_check_deck_too_big
         COMMAND ${CMAKE_COMMAND} -DCMD=/bin/sh
                 "-DARGS=-c;mkdir -p ${_fifo_dir} && head -c 1100000 /dev/zero | tr '\\000' '#' > ${_fifo_dir}/big.toml && exec $<TARGET_FILE:tptrain> check ${_fifo_dir}/big.toml"
                 -DEXPECT_FAIL=1 "-DREGEX=big\\.toml: cannot read deck file: it is 1100000 bytes, more than the limit of 1048576 bytes"
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set_tests_properties(cli_check_deck_too_big PROPERTIES TIMEOUT 30)

# Paths that cannot be accessed: the reason, not "does not exist"; a huge path is shortened.
string(REPEAT "a" 5000 _long)
tptrain_expect_fail(cli_check_name_too_long "the file name is too long \\(ENAMETOOLONG\\)"
                    check /tmp/${_long}.toml)
tptrain_expect_fail(cli_eval_checkpoint_name_too_long
                    "--checkpoint: .*\\([0-9]+ characters\\).* the file name is too long \\(ENAMETOOLONG\\)"
                    eval ${_decks}/valid.toml --checkpoint /tmp/${_long}.h5)
tptrain_expect_fail(cli_check_not_a_directory
                    "valid\\.toml/x\\.toml: cannot read deck file: .*not a directory \\(ENOTDIR\\)"
                    check ${_decks}/valid.toml/x.toml)
tptrain_expect_fail(cli_check_nul_in_path
                    "nul_path\\.toml:3: data\\.train = .*: expected a path without NUL characters"
                    check ${_decks}/nul_path.toml)

# --set messages.
tptrain_expect_fail(cli_check_set_malformed
                    "--set =1: expected section\\.key=value \\(malformed --set argument"
                    check ${_decks}/valid.toml --set =1)
tptrain_expect_fail(cli_check_set_out_of_range
                    "optimizer\\.lr = 1e999: expected a finite number > 0 \\(1e999 is out of range"
                    check ${_decks}/valid.toml --set optimizer.lr=1e999)

# Option ranges in words, not CLI11's 309-digit bounds.
tptrain_expect_fail(cli_generate_tokens_zero "--tokens: expected a positive integer, got 0"
                    generate ${_decks}/valid.toml --checkpoint ${_decks}/valid.toml --prompt x
                    --tokens 0)
tptrain_expect_fail(cli_eval_windows_zero "--windows: expected a positive integer, got 0"
                    eval ${_decks}/valid.toml --checkpoint ${_decks}/valid.toml --windows 0)
tptrain_expect_fail(cli_generate_temperature_negative
                    "--temperature: expected a non-negative number, got -1"
                    generate ${_decks}/valid.toml --checkpoint ${_decks}/valid.toml --prompt x
                    --temperature -1)
tptrain_expect_fail(cli_generate_top_k_negative "--top-k: expected a non-negative integer, got -2"
                    generate ${_decks}/valid.toml --checkpoint ${_decks}/valid.toml --prompt x
                    --top-k -2)
tptrain_expect_fail(cli_generate_seed_too_large "--seed: expected an integer from 0 to 18446744073709551615, got 1180591620717411303424"
                    generate ${_decks}/valid.toml --checkpoint ${_decks}/valid.toml --prompt x
                    --seed 1180591620717411303424)
tptrain_expect_fail(cli_generate_seed_negative "--seed: expected an integer from 0 to 18446744073709551615, got -1"
                    generate ${_decks}/valid.toml --checkpoint ${_decks}/valid.toml --prompt x --seed -1)
set_tests_properties(cli_generate_tokens_zero cli_eval_windows_zero
                     cli_generate_temperature_negative cli_generate_top_k_negative
                     PROPERTIES FAIL_REGULAR_EXPRESSION "[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]")
# Under mpiexec -n 2 a usage error is printed once (by world rank 0); every rank exits non-zero.
add_test(NAME cli_usage_error_once_mpi2
         COMMAND ${CMAKE_COMMAND} -DCMD=${MPIEXEC_EXECUTABLE}
                 "-DARGS=${MPIEXEC_NUMPROC_FLAG};2;${TPTRAIN_MPIEXEC_FLAGS};$<TARGET_FILE:tptrain>;generate;${_decks}/valid.toml;--checkpoint;${_decks}/valid.toml;--prompt;x;--tokens;0"
                 -DEXPECT_FAIL=1 "-DREGEX=--tokens: expected a positive integer, got 0"
                 "-DCOUNT_REGEX=expected a positive integer" -DCOUNT=1
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set_tests_properties(cli_usage_error_once_mpi2 PROPERTIES TIMEOUT 60)

# check --ranks / --json: machine-readable forms for scripts (jobs/run-local.sh).
add_test(NAME cli_check_ranks COMMAND tptrain check ${_decks}/valid.toml --ranks)
set_tests_properties(cli_check_ranks PROPERTIES PASS_REGULAR_EXPRESSION "^2\n$" TIMEOUT 30)
add_test(NAME cli_check_ranks_needs4 COMMAND tptrain check ${_decks}/needs4.toml --ranks
         --set parallel.data=2)
set_tests_properties(cli_check_ranks_needs4 PROPERTIES PASS_REGULAR_EXPRESSION "^8\n$" TIMEOUT 30)
add_test(NAME cli_check_json COMMAND tptrain check ${_decks}/valid.toml --json)
set_tests_properties(cli_check_json PROPERTIES TIMEOUT 30 PASS_REGULAR_EXPRESSION
  "^\\{\"model\\.architecture\": \"gpt2\", \"model\\.norm\": \"layernorm\", \"model\\.mlp\": \"gelu\", \"model\\.position\": \"learned\", \"model\\.attention\": \"gqa\", \"model\\.qkv_bias\": true, \"model\\.linear_bias\": true, \"model\\.layers\": 2, \"model\\.hidden\": 32, [^\n]*\"data\\.train\": \"[^\"]*/corpus\\.txt\", [^\n]*\"run\\.dir\": \"[^\"]*\", \"ranks\": 2\\}\n$")
tptrain_expect_fail(cli_check_ranks_bad_deck "typo\\.toml:[0-9]+:.*model\\.hiden"
                    check ${_decks}/typo.toml --ranks)

# Every shipped deck passes `check` on a machine without its data (the cluster decks' .bin
# shards live on the cluster): a missing data file is a warning naming the key; train refuses it.
file(GLOB _shipped_decks ${PROJECT_SOURCE_DIR}/input/*.toml ${PROJECT_SOURCE_DIR}/input/bench/*.toml)
foreach(_deck IN LISTS _shipped_decks)
  file(RELATIVE_PATH _name ${PROJECT_SOURCE_DIR}/input ${_deck})
  string(REGEX REPLACE "[/.]" "_" _name "${_name}")
  add_test(NAME cli_check_shipped_${_name} COMMAND tptrain check ${_deck})
  set_tests_properties(cli_check_shipped_${_name} PROPERTIES TIMEOUT 30 PASS_REGULAR_EXPRESSION ": valid \\(needs")
endforeach()
add_test(NAME cli_check_missing_data_is_a_warning
         COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tptrain> "-DARGS=check;${PROJECT_SOURCE_DIR}/input/gpt3-175b.toml"
                 -DEXPECT_FAIL=0 "-DREGEX=: valid \\(needs 1024 MPI ranks.*warning: .*gpt3-175b\\.toml:[0-9]+: data\\.train = \"\\.\\./data/gpt3/train\\.bin\": .*train\\.bin does not exist \\(needed by train and eval"
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set_tests_properties(cli_check_missing_data_is_a_warning PROPERTIES TIMEOUT 30)
add_test(NAME cli_train_missing_data_is_an_error
         COMMAND ${CMAKE_COMMAND} -DCMD=${MPIEXEC_EXECUTABLE}
                 "-DARGS=${MPIEXEC_NUMPROC_FLAG};1;${TPTRAIN_MPIEXEC_FLAGS};$<TARGET_FILE:tptrain>;train;${PROJECT_SOURCE_DIR}/input/gpt3-175b.toml;--set;data.valid=;--set;parallel.tensor=1;--set;parallel.pipeline=1;--set;parallel.data=1"
                 -DEXPECT_FAIL=1 "-DREGEX=data\\.train = \"\\.\\./data/gpt3/train\\.bin\": expected an existing, readable .* does not exist"
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set_tests_properties(cli_train_missing_data_is_an_error PROPERTIES TIMEOUT 60)

# parallel.virtual_stages (interleaved 1F1B): each rule named on the key (tests/data/cli/valid.toml:
# 2 layers, tensor 2, 2 micro-batches per step).
tptrain_expect_fail(cli_check_virtual_stages_without_pipeline
  "parallel\\.virtual_stages = 2: expected 1 with parallel\\.pipeline = 1"
  check ${_decks}/valid.toml --set parallel.virtual_stages=2)
tptrain_expect_fail(cli_check_virtual_stages_layers
  "parallel\\.virtual_stages = 2: expected a divisor of model\\.layers / parallel\\.pipeline: model\\.layers = 2 must be a multiple of parallel\\.pipeline \\* parallel\\.virtual_stages = 2 \\* 2 = 4"
  check ${_decks}/valid.toml --set parallel.tensor=1 --set parallel.pipeline=2 --set parallel.virtual_stages=2)
tptrain_expect_fail(cli_check_virtual_stages_micro_batches
  "parallel\\.virtual_stages = 2: expected 1 with 3 micro-batches per step .*multiple of it"
  check ${_decks}/valid.toml --set parallel.tensor=1 --set parallel.pipeline=2 --set model.layers=4
  --set parallel.virtual_stages=2 --set training.global_batch=6)
tptrain_expect_fail(cli_check_virtual_stages_zero "parallel\\.virtual_stages = 0: expected an integer >= 1"
  check ${_decks}/valid.toml --set parallel.virtual_stages=0)

# parallel.context (ring attention): its rules, each named on a key (tests/data/cli/valid.toml:
# seq_length 16, tensor 2, heads 4).
tptrain_expect_fail(cli_check_context_seq_length
  "model\\.seq_length = 16: expected a multiple of 2 \\* parallel\\.context = 6 with parallel\\.context = 3 \\(--set parallel\\.context=3\\)"
  check ${_decks}/valid.toml --set parallel.context=3)
tptrain_expect_fail(cli_check_context_sequence_parallel
  "model\\.seq_length = 24: expected a multiple of parallel\\.context \\* parallel\\.tensor = 16 with parallel\\.context = 4 \\(--set parallel\\.context=4\\), parallel\\.tensor = 4 \\(--set parallel\\.tensor=4\\) and parallel\\.sequence_parallel = true"
  check ${_decks}/valid.toml --set parallel.tensor=4 --set model.seq_length=24 --set parallel.context=4
  --set parallel.sequence_parallel=true)
tptrain_expect_fail(cli_check_context_batched_attention
  "parallel\\.context = 2: expected 1 with training\\.attention = \"batched\""
  check ${_decks}/valid.toml --set parallel.context=2 --set training.attention=batched)
tptrain_expect_fail(cli_check_context_tasks
  "parallel\\.context = 2: expected 1 with training\\.tasks .*tptrain eval --tasks --set parallel\\.context=1"
  check ${_decks}/valid.toml --set parallel.context=2 --set training.tasks=corpus.txt)
tptrain_expect_fail(cli_check_context_zero "parallel\\.context = 0: expected an integer >= 1"
  check ${_decks}/valid.toml --set parallel.context=0)
add_test(NAME cli_check_context_ranks COMMAND tptrain check ${_decks}/valid.toml --set parallel.context=2)
set_tests_properties(cli_check_context_ranks PROPERTIES
  PASS_REGULAR_EXPRESSION "valid \\(needs 4 MPI ranks: tensor 2 x context 2 x pipeline 1 x data 1\\)")
# 3 ranks for tensor 1 x context 2: every rank exits non-zero, one message naming the context axis.
add_test(NAME cli_context_world_size_mismatch
         COMMAND ${CMAKE_COMMAND} -DCMD=${MPIEXEC_EXECUTABLE}
         "-DARGS=${MPIEXEC_NUMPROC_FLAG};3;${TPTRAIN_MPIEXEC_FLAGS};$<TARGET_FILE:tptrain>;train;${_decks}/valid.toml;--set;parallel.tensor=1;--set;parallel.context=2"
         -DEXPECT_FAIL=1 "-DREGEX=started 3 ranks but .*tensor x context x pipeline x data = 1 x 2 x 1 x 1 = 2 ranks"
         -DCOUNT_REGEX=started -DCOUNT=1 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
set_tests_properties(cli_context_world_size_mismatch PROPERTIES TIMEOUT 60)

# The mixture of experts (model.mlp = "moe") and expert parallelism (parallel.expert): each rule
# named on a key (tests/data/cli/valid.toml: a gpt2 deck, tensor 2, data 1, global batch 4 of
# micro-batches of 2).
tptrain_expect_fail(cli_check_expert_without_moe
  "parallel\\.expert = 2: expected 1 without a mixture of experts"
  check ${_decks}/valid.toml --set parallel.data=2 --set parallel.expert=2)
tptrain_expect_fail(cli_check_expert_divides_data
  "parallel\\.data = 2: expected a multiple of parallel\\.expert = 4 \\(--set parallel\\.expert=4\\); expert parallelism takes its ranks from the data-parallel ones"
  check ${_decks}/valid.toml --set model.architecture=mixtral --set parallel.data=2 --set parallel.expert=4)
tptrain_expect_fail(cli_check_experts_multiple_of_expert
  "model\\.experts = 3: expected a multiple of parallel\\.expert = 2 .*whole experts"
  check ${_decks}/valid.toml --set model.architecture=mixtral --set model.experts=3 --set parallel.data=2
  --set parallel.expert=2)
tptrain_expect_fail(cli_check_experts_per_token_above_experts
  "model\\.experts_per_token = 3: expected at most model\\.experts = 2"
  check ${_decks}/valid.toml --set model.architecture=mixtral --set model.experts=2 --set model.experts_per_token=3)
tptrain_expect_fail(cli_check_moe_linear_bias
  "model\\.linear_bias = true: expected false with model\\.mlp = \"moe\""
  check ${_decks}/valid.toml --set model.architecture=mixtral --set model.linear_bias=true)
tptrain_expect_fail(cli_check_experts_without_moe
  "model\\.experts = 4: expected to be left out with model\\.mlp = \"gelu\""
  check ${_decks}/valid.toml --set model.experts=4)
tptrain_expect_fail(cli_check_moe_aux_loss_without_moe
  "training\\.moe_aux_loss_coeff = 0\\.1: expected to be left out with model\\.mlp = \"gelu\""
  check ${_decks}/valid.toml --set training.moe_aux_loss_coeff=0.1)
# DeepSeek-V3's routing (model.moe_score_function, model.moe_groups) and the scaled rotary kinds.
tptrain_expect_fail(cli_check_moe_groups_divide_experts
  "model\\.moe_groups = 3: expected a divisor of model\\.experts = 8 leaving at least 2 experts per group"
  check ${_decks}/valid.toml --set model.architecture=mixtral --set model.moe_groups=3)
tptrain_expect_fail(cli_check_moe_sigmoid_z_loss
  "training\\.moe_z_loss_coeff = 0\\.001: expected 0 with model\\.moe_score_function = \"sigmoid\""
  check ${_decks}/valid.toml --set model.architecture=mixtral --set model.moe_score_function=sigmoid
  --set training.moe_z_loss_coeff=0.001)
tptrain_expect_fail(cli_check_moe_score_function_unknown
  "model\\.moe_score_function = \"tanh\": expected one of \"softmax\", \"sigmoid\""
  check ${_decks}/valid.toml --set model.architecture=mixtral --set model.moe_score_function=tanh)
tptrain_expect_fail(cli_check_llama3_band
  "model\\.rope_high_freq_factor = 1: expected above model\\.rope_low_freq_factor = 1"
  check ${_decks}/valid.toml --set model.architecture=llama --set model.position=llama3
  --set model.rope_high_freq_factor=1)
tptrain_expect_fail(cli_check_rope_factor_without_scaling
  "model\\.rope_factor = 4: expected to be left out with model\\.position = \"rope\""
  check ${_decks}/valid.toml --set model.architecture=llama --set model.rope_factor=4)
tptrain_expect_fail(cli_check_expert_zero "parallel\\.expert = 0: expected an integer >= 1"
  check ${_decks}/valid.toml --set parallel.expert=0)
# input/mixtral-tiny.toml: data 2, expert 2 on 2 ranks (expert parallelism adds none).
add_test(NAME cli_check_mixtral_tiny COMMAND tptrain check ${PROJECT_SOURCE_DIR}/input/mixtral-tiny.toml)
set_tests_properties(cli_check_mixtral_tiny PROPERTIES TIMEOUT 30
  PASS_REGULAR_EXPRESSION "valid \\(needs 2 MPI ranks: tensor 1 x pipeline 1 x data 2")
add_test(NAME cli_check_expert_ranks COMMAND tptrain check ${_decks}/valid.toml --ranks
         --set model.architecture=mixtral --set parallel.data=2 --set parallel.expert=2)
set_tests_properties(cli_check_expert_ranks PROPERTIES PASS_REGULAR_EXPRESSION "^4\n$" TIMEOUT 30)
