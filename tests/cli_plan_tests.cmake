# `tptrain plan` through the executable: the shipped GPT-3 175B decks on 1024 80-GB A100s, the
# refusal of the seed article's deck for both of its reasons, the JSON line, option errors, counts
# beyond 64 bits, figures beyond a double, and huge decks in bounded time.
# (The formulas themselves: tests/plan/test_plan.cpp.) No MPI, no data files.
set(_input ${PROJECT_SOURCE_DIR}/input)

function(tptrain_plan_test name expect_fail regex)
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:tptrain> "-DARGS=${ARGN}"
           -DEXPECT_FAIL=${expect_fail} "-DREGEX=${regex}" -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
  set_tests_properties(${name} PROPERTIES TIMEOUT 60)
endfunction()

# Megatron's layout fits; its step is simulated on the default machine (a DGX A100 80 GB): about
# a month for 300B tokens (Narayanan et al. 2021: 34 days at 140 TFLOP/s).
tptrain_plan_test(cli_plan_gpt3_175b 0
  "fits.*300 B tokens = 95367 iterations: [23][0-9]\\.[0-9] days.*result: the deck fits\n\\{[^\n]*\"fits\": true, \"problems\": \\[\\][^\n]*\\}\n"
  plan ${_input}/gpt3-175b.toml --gpus-per-node 8 --gpu-memory 80 --peak-tflops 312)
# The seed's deck on its "1024 A100 GPUs": the rank count AND the memory, then what would fit.
tptrain_plan_test(cli_plan_gpt3_175b_seed 1
  "problem: wrong GPU count: the deck needs tensor 8 x context 1 x pipeline 16 x data 32 = 4096 GPUs, but 1024 are given \\(--gpus\\).*problem: does not fit: the most loaded rank \\(pipeline stage 0\\) needs [0-9.]+ GiB, more than --gpu-memory 80 GiB.*nearest layouts of 1024 GPUs that fit.*--set parallel\\.data=8"
  plan ${_input}/gpt3-175b-seed.toml --gpus 1024 --gpus-per-node 8 --gpu-memory 80)
# Its launch script's tensor 8 x pipeline 4 on 32 GPUs: the GPU count is right, the memory is not.
tptrain_plan_test(cli_plan_gpt3_175b_seed_32_gpus 1
  "result: the deck cannot run as written\n  problem: does not fit: "
  plan ${_input}/gpt3-175b-seed.toml --set parallel.pipeline=4 --set parallel.data=1 --gpu-memory 80)
tptrain_plan_test(cli_plan_gpt3_175b_seed_corrected 0 "result: the deck fits"
  plan ${_input}/gpt3-175b-seed-corrected.toml --gpus 1024)
# Widths that are not multiples of 8 (tensor-core shapes): a warning naming the key, and a plan;
# the padded vocabulary follows model.vocab_pad_multiple (50257 -> 50304 with the default 128).
tptrain_plan_test(cli_plan_tensor_core_warning 0
  "vocab 50257 \\(padded 50304\\).*warning: --set model\\.hidden=772: model\\.hidden = 772 is not a multiple of 8.*the head dimension model\\.hidden / model\\.heads = 193 is not a multiple of 8"
  plan ${_input}/gpt2-124m.toml --set model.hidden=772 --set model.heads=4)
tptrain_plan_test(cli_check_tensor_core_warning 0
  ": valid \\(needs.*warning: .*model\\.ffn_hidden = 3084 is not a multiple of 8"
  check ${_input}/gpt2-124m.toml --set model.ffn_hidden=3084)

# More memory per GPU, fewer GPUs per node: the same deck, other answers.
tptrain_plan_test(cli_plan_tensor_across_nodes 0
  "note: a tensor-parallel group of 8 ranks does not fit in a node of 4 GPUs"
  plan ${_input}/gpt3-175b.toml --gpus-per-node 4)
tptrain_plan_test(cli_plan_small_gpu 1 "does not fit: .*more than --gpu-memory 16 GiB"
  plan ${_input}/gpt3-175b.toml --gpu-memory 16)
# Bad options and decks: named, exit 2 (usage) or 1 (deck).
tptrain_plan_test(cli_plan_efficiency_gone 2 "--efficiency"
  plan ${_input}/gpt3-175b.toml --efficiency 0.45)
tptrain_plan_test(cli_plan_machine_unknown_key 1 "bad-machine\\.toml:[0-9]+: gemm\\.tile_k: unknown key"
  plan ${_input}/gpt3-175b.toml --machine ${CMAKE_CURRENT_SOURCE_DIR}/plan/bad-machine.toml)
tptrain_plan_test(cli_plan_machine_h100 0 "machine +DGX H100 .*H100 SXM5 80 GB 989\\.4 TFLOP/s bf16 peak.*MFU [0-9.]+ %"
  plan ${_input}/gpt3-175b.toml --machine ${_input}/machines/dgx-h100.toml)
tptrain_plan_test(cli_plan_tokens_negative 1 "--tokens: expected a positive number, got -3"
  plan ${_input}/gpt3-175b.toml --tokens=-3)
tptrain_plan_test(cli_plan_expert_imbalance_below_one 1 "--expert-imbalance: expected a number >= 1, got 0.5"
  plan ${_input}/mixtral-8x7b.toml --expert-imbalance 0.5)
tptrain_plan_test(cli_plan_bad_deck 1 "invalid deck .*--set parallel\\.tensor=7: parallel\\.tensor = 7: expected a divisor of model\\.heads = 96"
  plan ${_input}/gpt3-175b.toml --set parallel.tensor=7)

# The JSON line is the last line of stdout, alone.
add_test(NAME cli_plan_json_last_line COMMAND tptrain plan ${_input}/gpt2-124m.toml)
set_tests_properties(cli_plan_json_last_line PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION
  "\n\\{\"deck\": \"[^\n]*gpt2-124m\\.toml\", \"gpus\": 8, [^\n]*\"params\": 124439808, [^\n]*\"memory_bytes\": \\{\"weights\": [0-9]+, [^\n]*\"training_days\": [0-9.e+-]+, [^\n]*\"fits\": true, \"problems\": \\[\\], \"suggestions\": \\[\\]\\}\n$")

# A figure beyond a double is null in the JSON line (it printed inf), and the report says why.
tptrain_plan_test(cli_plan_gpu_memory_beyond_double 0
  "note: gpu_memory_bytes = inf: beyond the range of a double [^\n]*; null in the JSON line.*\"gpu_memory_bytes\": null, "
  plan ${_decks}/valid.toml --gpu-memory 1e300)
tptrain_plan_test(cli_plan_days_beyond_double 0
  "note: training_days = inf, [^\n]*: beyond the range of a double.*\"training_days\": null, \"training_days_eq4\": null"
  plan ${_decks}/valid.toml --tokens 1e308 --peak-tflops 1e-300)
# Counts beyond 2^63 - 1 are refused naming the key (they wrapped: 8.66 B parameters for 6.4e19,
# a negative total that "fit").
tptrain_plan_test(cli_plan_parameters_beyond_64_bits 1
  "model\\.hidden = 500000000 is too large: the parameter count \\(with [^\n]*model\\.layers = 64[^\n]*\\) exceeds 2\\^63 - 1"
  plan ${_decks}/valid.toml --set model.hidden=500000000 --set model.heads=2 --set model.ffn_hidden=2
  --set model.layers=64)
tptrain_plan_test(cli_plan_bytes_beyond_64_bits 1
  "model\\.hidden = 715827882 is too large: the byte count of a rank \\(with [^\n]*\\) exceeds 2\\^63 - 1"
  plan ${_decks}/valid.toml --set model.hidden=715827882 --set model.heads=2 --set model.ffn_hidden=2
  --set model.layers=2)
# Plan time does not grow with the layers or the GPUs per node (2,000,000 layers took over a
# minute, a node of 2^31 - 1 GPUs 12 s): a few seconds at most on a loaded machine.
tptrain_plan_test(cli_plan_2000000_layers 1 "model        gpt2: 2000000 layers, .*\n\\{\"deck\": [^\n]*\"params\": 25408008768, "
  plan ${_decks}/valid.toml --set model.layers=2000000)
tptrain_plan_test(cli_plan_node_of_2147483647_gpus 1 "wrong GPU count: .*nearest layouts of 4 GPUs that fit"
  plan ${_decks}/valid.toml --gpus 4 --gpus-per-node 2147483647)
set_tests_properties(cli_plan_2000000_layers cli_plan_node_of_2147483647_gpus PROPERTIES TIMEOUT 5)

# parallel.order: the bytes across nodes under each order and the recommendation (docs/planning.md,
# "Across nodes"). Tensor 4 on nodes of 8: tp-pp-dp keeps two stages in a node, tp-dp-pp two
# replicas, whose data-parallel rings then cross half as often; the data bytes outweigh the
# pipeline's, so Megatron's order wins.
tptrain_plan_test(cli_plan_order_recommended 0
  "  tp-pp-dp \\(deck\\) +0 B +0 B +[0-9.]+ GiB +[0-9.]+ GiB +[0-9.]+ GiB +[0-9.]+ GiB\n  tp-dp-pp +0 B +0 B [^\n]*\n  recommended: --set parallel\\.order=tp-dp-pp \\([0-9.]+ GiB across nodes per step instead of [0-9.]+ GiB\\).*\"order\": \"tp-pp-dp\", \"cross_node_bytes_per_step\": \\{\"tp-pp-dp\": \\{\"tensor\": 0, \"context\": 0, \"pipeline\": [0-9]+, \"data\": [0-9]+, \"embedding\": [0-9]+, \"total\": [0-9]+\\}, \"tp-dp-pp\": \\{[^}]*\\}\\}, \"recommended_order\": \"tp-dp-pp\""
  plan ${_input}/gpt3-175b.toml --gpus-per-node 8 --set parallel.tensor=4 --set parallel.data=16)
tptrain_plan_test(cli_plan_order_of_the_deck 0
  "layout [^\n]*, order tp-dp-pp;.*  tp-dp-pp \\(deck\\) [^\n]*\n  recommended: parallel\\.order = \"tp-dp-pp\", the deck's .*\"order\": \"tp-dp-pp\",[^\n]*\"recommended_order\": \"tp-dp-pp\""
  plan ${_input}/gpt3-175b.toml --gpus-per-node 8 --set parallel.tensor=4 --set parallel.data=16
  --set parallel.order=tp-dp-pp)
tptrain_plan_test(cli_plan_order_bad 1
  "--set parallel\\.order=pp-tp-dp: parallel\\.order = \"pp-tp-dp\": expected one of \"tp-pp-dp\", \"tp-dp-pp\""
  plan ${_input}/gpt3-175b.toml --set parallel.order=pp-tp-dp)
# 2^31 - 4 ranks on nodes of 3: counted by formula, in bounded time.
tptrain_plan_test(cli_plan_order_2147483644_ranks_nodes_of_3 0
  "recommended: --set parallel\\.order=tp-dp-pp"
  plan ${_decks}/valid.toml --set parallel.pipeline=2 --set parallel.data=536870911
  --set training.global_batch=1073741822 --gpus-per-node 3)
set_tests_properties(cli_plan_order_2147483644_ranks_nodes_of_3 PROPERTIES TIMEOUT 5)
# Interleaved 1F1B on GPT-3 175B (p = 16, m = 192): the bubble halves to 3.9 % and the simulated
# run saves about a day; the first stage keeps 32 + 16 micro-batches of its 2 chunks.
tptrain_plan_test(cli_plan_gpt3_175b_virtual_stages 0
  "pipeline stage 0 of 16 \\(6 layers in 2 chunks of 3, 32 \\+ 16 = 48 micro-batches in flight\\).*pipeline bubble +\\(p - 1\\)/\\(v m\\) = 15/\\(2 x 192\\) = 3\\.9 % of the ideal step, interleaved \\(1F1B without it: 7\\.8 %; simulated: [0-9.]+ % idle\\): [0-9.]+ days saved.*\"pipeline_bubble\": 0\\.0390625, \"virtual_stages\": 2, \"pipeline_bubble_without_interleaving\": 0\\.078125, \"days_saved_by_interleaving\": [0-9.]+"
  plan ${_input}/gpt3-175b.toml --set parallel.virtual_stages=2)

# Llama (docs/planning.md, "Llama"): the two published parameter counts, exactly, from the
# shipped decks, which fit their layouts on 80-GB GPUs; the JSON line has the formula's count too.
tptrain_plan_test(cli_plan_llama2_7b 0
  "model        llama: 32 layers, hidden 4096, 32 heads \\(32 key/value\\), ffn 11008 \\(SwiGLU\\), seq_length 4096, vocab 32000 \\(padded 32000\\), untied; RMSNorm eps 1e-05, RoPE theta 10000; biases none.*parameters   6\\.74 B: 6738415616 exactly \\(tptrain's tensors\\), 6738415616 by Llama's formula.*result: the deck fits\n\\{[^\n]*\"params\": 6738415616, [^\n]*\"params_llama_formula\": 6738415616, [^\n]*\"fits\": true"
  plan ${_input}/llama2-7b.toml --gpu-memory 80)
tptrain_plan_test(cli_plan_llama3_8b 0
  "model        llama: 32 layers, hidden 4096, 32 heads \\(8 key/value\\), ffn 14336 \\(SwiGLU\\), seq_length 8192, vocab 128256 \\(padded 128256\\), untied; RMSNorm eps 1e-05, RoPE theta 500000.*parameters   8\\.03 B: 8030261248 exactly \\(tptrain's tensors\\), 8030261248 by Llama's formula.*result: the deck fits\n\\{[^\n]*\"params\": 8030261248, [^\n]*\"params_llama_formula\": 8030261248, [^\n]*\"fits\": true"
  plan ${_input}/llama3-8b.toml --gpu-memory 80)
# A layout the model cannot split: 8 key/value heads over 16 tensor ranks, named on the key.
tptrain_plan_test(cli_plan_llama3_8b_kv_heads_tensor 1 "model\\.kv_heads"
  plan ${_input}/llama3-8b.toml --set parallel.tensor=16 --set parallel.data=16)

# Context parallelism (docs/planning.md, "Context parallelism"): Llama-3-8B at 131072 tokens on
# tensor 8 x context 8 fits, each rank holding 16384 tokens; the ring's bytes are a row of their
# own. Without context parallelism on tensor 4 it does not fit, and the nearest layouts that do
# split the sequence.
tptrain_plan_test(cli_plan_llama3_8b_128k 0
  "layout       tensor 8 x context 8 x pipeline 1 x data 1 = 64 GPUs, order tp-cp-pp-dp; 64 given, 8 per node; 16384 tokens of each sequence per rank \\(2 chunks of 8192\\).*  context   \\(   8 ranks\\)   240\\.00 GiB   ring attention: .*  data      \\(   8 ranks\\)   [0-9.]+ GiB   the gradients over data 1 x context 8.*result: the deck fits\n\\{[^\n]*\"tensor\": 8, \"context\": 8, \"pipeline\": 1, \"data\": 1, [^\n]*\"communication_bytes_per_step\": \\{\"tensor\": [0-9]+, \"context\": 257698037760, [^\n]*\"fits\": true"
  plan ${_input}/llama3-8b-128k.toml --gpu-memory 80)
tptrain_plan_test(cli_plan_llama3_8b_128k_without_context 1
  "problem: does not fit: .*nearest layouts of 64 GPUs that fit.*--set parallel\\.context=4 --set parallel\\.data=4"
  plan ${_input}/llama3-8b-128k.toml --set parallel.tensor=4 --set parallel.context=1 --set parallel.data=16)

# A mixture of experts (docs/planning.md, "Mixture of experts"): Mixtral-8x7B's published count
# exactly, its active count, the expert group's share of the experts, the all-to-all row and the
# expert columns across nodes (inside a node under the deck's tp-dp-pp); the JSON line's MoE keys.
tptrain_plan_test(cli_plan_mixtral_8x7b 0
  "ffn 14336 \\(MoE: 8 SwiGLU experts, 2 per token\\).*layout       tensor 1 x context 1 x pipeline 4 x data 16 \\(expert 8: 1 of the 8 experts of a block per rank\\) = 64 GPUs.*parameters   46\\.70 B: 46702792704 exactly \\(tptrain's tensors\\), 46702792704 by Mixtral's formula.*active       12\\.88 B per token: 12879925248 .*  expert    \\(   8 ranks\\)   112\\.00 GiB   all-to-all: .*  tp-dp-pp \\(deck\\) +0 B +0 B +0 B .*result: the deck fits\n\\{[^\n]*\"data\": 16, \"expert\": 8, [^\n]*\"params\": 46702792704, [^\n]*\"params_moe_formula\": 46702792704, \"params_active\": 12879925248, [^\n]*\"fits\": true"
  plan ${_input}/mixtral-8x7b.toml --gpu-memory 80 --peak-tflops 989)
# Plan time and memory do not grow with the experts (65536 experts on 65536 ranks took over 2
# minutes, quadratic in experts x expert ranks; 2^31 - 1 experts 24 GB and a bad_alloc): the plan
# and its layout search in a few seconds (the count the formula's, a rank's experts 32 x 3hf), and
# a count beyond 64 bits refused by name within 2 GB of data (ulimit -d, not -v: a GPU runtime
# reserves address space).
tptrain_plan_test(cli_plan_65536_experts 1
  "\\(expert 65536: 1 of the 65536 experts of a block per rank\\) = 65536 GPUs.*parameters   369446\\.10 B: 369446101454848 exactly \\(tptrain's tensors\\), 369446101454848 by Mixtral's formula.*5637144576 of them its 1 of 65536 experts in each of its 32 blocks.*problem: does not fit: .*no layout of 65536 GPUs both suits the model"
  plan ${_input}/mixtral-8x7b.toml --set model.experts=65536 --set parallel.expert=65536 --set parallel.data=65536
  --set parallel.pipeline=1 --set training.global_batch=65536)
add_test(NAME cli_plan_2147483647_experts COMMAND ${CMAKE_COMMAND} -DCMD=sh
  "-DARGS=-c;ulimit -d 2000000 && exec $<TARGET_FILE:tptrain> plan ${_input}/mixtral-8x7b.toml --set model.experts=2147483647 --set parallel.expert=1"
  -DEXPECT_FAIL=1
  "-DREGEX=model\\.experts = 2147483647 is too large: the parameter count \\(with [^\n]*\\) exceeds 2\\^63 - 1"
  -P ${CMAKE_CURRENT_SOURCE_DIR}/run_expect.cmake)
# (3.3 s on the 2-core machine with the four shard modes in the search; 10 s leaves room for a
# parallel ctest and still catches the old minutes.)
set_tests_properties(cli_plan_65536_experts cli_plan_2147483647_experts PROPERTIES TIMEOUT 10)
# Without expert parallelism each rank holds all 8 experts of its blocks (99.7 GiB): on 48-GiB GPUs
# the nearest layout splits them again (44.7 GiB).
tptrain_plan_test(cli_plan_mixtral_8x7b_expert_search 1
  "problem: does not fit: .*nearest layouts of 64 GPUs that fit \\(fewest changes first\\):\n  44\\.7 GiB per rank, [0-9.]+ days: --set parallel\\.expert=8\n"
  plan ${_input}/mixtral-8x7b.toml --set parallel.expert=1 --gpu-memory 48)
