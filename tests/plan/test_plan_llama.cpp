// `tptrain plan` for llama decks (docs/planning.md, "Llama"): the published parameter counts of
// Llama-2-7B and Llama-3-8B from the model's own tables and from Llama's formula, with the padded
// vocabulary kept out of the logical count; the FLOPs of SwiGLU and grouped-query attention
// against the model's tensor list; the activation inventory buffer by buffer and against what a
// llama model stage allocates; the shipped llama decks fit 80 GB GPUs.
#include "catch.hpp"

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "src/model/gpt_model.hpp"
#include "src/plan/activation_memory.hpp"
#include "src/plan/flops.hpp"
#include "src/plan/parameter_count.hpp"
#include "src/plan/plan.hpp"
#include "src/model/model_flops.hpp"
#include "tests/mpi_test_util.hpp"
#include "tests/plan/plan_test_util.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;
using namespace tptrain::plan;

namespace {

using test::llama;
using test::small_llama;

model::GptShape llama2_7b() { return llama(32, 4096, 32, 32, 11008, 32000, 4096); }
model::GptShape llama3_8b() { return llama(32, 4096, 32, 8, 14336, 128256, 8192); }

double formula(const model::GptShape& s) {
  return llama_parameters(s.layers, s.hidden, s.heads, s.kv_head_count(), s.ffn_hidden, s.vocab_size,
                          s.tie_embeddings);
}

io::Deck shipped(const std::string& name) {
  return io::load_deck(std::string(TPTRAIN_SOURCE_DIR) + "/input/" + name, {}, io::DataFiles::may_be_absent);
}

}  // namespace

TEST_CASE("plan: Llama-2-7B and Llama-3-8B parameters, exactly and by formula", "[plan][llama]") {
  CHECK(exact_parameters(llama2_7b()) == 6738415616);
  CHECK(formula(llama2_7b()) == 6738415616.0);
  CHECK(exact_parameters(llama3_8b()) == 8030261248);
  CHECK(formula(llama3_8b()) == 8030261248.0);
  // Padding never enters the logical count: with tensor 2 and a pad multiple of 48, 32000 is
  // allocated as 32064 rows (a multiple of 96) in the embedding and in lm_head.
  model::GptShape padded = llama2_7b();
  padded.vocab_pad_multiple = 48;
  padded.tensor = 2;
  REQUIRE(padded.padded_vocab() == 32064);
  const double unpadded = formula(padded);
  CHECK(double(exact_parameters(padded)) == unpadded);
  // ... but the ranks allocate it: both [V_pad/t, H] tensors; the norms are replicated.
  const StageParameters one = stage_parameters(padded, 1);
  const StageParameters two = stage_parameters(padded, 2);
  const std::int64_t replicated = 32 * 2 * 4096 + 4096;
  CHECK(2 * one.of(0) == std::int64_t(unpadded) + replicated - 2 * 32000 * 4096 + 2 * 32064 * 4096);
  // Untied: the last stage holds lm_head and the final norm, no copy of the embedding.
  CHECK(two.of(0) + two.of(1) == one.of(0));
  // Tied (as Llama 3.2's small models): one V x H tensor less, and a copy on the last stage.
  model::GptShape tied = llama3_8b();
  tied.tie_embeddings = true;
  CHECK(exact_parameters(tied) == 8030261248 - 128256 * 4096);
  CHECK(double(exact_parameters(tied)) == formula(tied));
  const StageParameters tied_two = stage_parameters(tied, 2);
  CHECK(tied_two.of(0) + tied_two.of(1) == stage_parameters(tied, 1).of(0) + 128256 * 4096);
  // The formula against the model's tensor list, for a grouped shape with odd sizes.
  const model::GptShape odd = llama(3, 48, 6, 3, 200, 1000, 7);
  double listed = 0;
  for (const model::LogicalTensor& t : model::logical_tensors(odd)) {
    double n = 1;
    for (const std::int64_t d : t.shape) n *= double(d);
    listed += n;
  }
  CHECK(listed == formula(odd));
  CHECK(double(exact_parameters(odd)) == listed);
}

TEST_CASE("plan: the shipped Llama decks plan with their exact counts and fit 80 GB GPUs", "[plan][llama]") {
  Hardware a100;  // 8 GPUs per node, 80 GiB
  for (const auto& [name, parameters] :
       {std::pair{"llama2-7b.toml", std::int64_t(6738415616)}, std::pair{"llama3-8b.toml", std::int64_t(8030261248)},
        std::pair{"llama3-8b-128k.toml", std::int64_t(8030261248)}}) {  // the last with parallel.context = 8
    INFO(name);
    const Plan p = make_plan(shipped(name), a100);
    CHECK(p.parameters == parameters);
    CHECK(p.parameters_llama == double(parameters));
    INFO(report(p));
    CHECK(p.ok());
    CHECK(p.notes.empty());
    CHECK(p.memory.total() < std::int64_t(80) << 30);
    CHECK_THAT(report(p), Catch::Matchers::Contains(std::to_string(parameters) + " exactly"));
  }
}

TEST_CASE("plan: a llama block's FLOPs are its weights' and the attention's", "[plan][llama][bench]") {
  // The block's GEMMs counted from the model's own tensor list: 2 FLOPs per weight element and
  // token; the attention products 4·S·H whatever kv_heads is (the query heads' products).
  for (const int kv : {8, 2, 1}) {
    model::GptShape s = llama(1, 64, 8, kv, 176, 300, 32);
    INFO("kv_heads " << kv);
    double weights = 0;
    for (const model::LogicalTensor& t : model::logical_tensors(s))
      if (t.shape.size() == 2 && t.name.rfind("layers/", 0) == 0) weights += double(t.shape[0]) * double(t.shape[1]);
    const double B = 3, S = s.seq_length;
    CHECK(block_forward_flops(B, s) == Approx(2 * B * S * weights + 4 * B * S * S * s.hidden).epsilon(1e-14));
    // Grouped-query attention: K and V are kv/heads of Q's width.
    CHECK(weights == 64.0 * (64 + 2 * 8 * kv) + 64 * 64 + 3 * 64 * 176);
    // MFU's N: every parameter but the untied word embedding (a lookup); lm_head is the logits GEMM.
    s.layers = 2;
    CHECK(model::flops_parameters(s) == double(exact_parameters(s)) - 300.0 * 64);
    CHECK(model::training_flops_per_token(s) == 6 * model::flops_parameters(s) + 12.0 * 2 * 32 * 64);
    // A recomputed forward is a third of the training FLOPs but the norms' weights (6N counts
    // them by convention, the forward's GEMMs do not): 2 per block and the final one.
    CHECK(model::forward_flops_per_token(s, 2, true) * 3 + 6.0 * (2 * 2 + 1) * 64 ==
          Approx(model::training_flops_per_token(s)).epsilon(1e-14));
  }
  // Llama-2-7B: 6N with N = 6.74 B less the embedding's 131 M.
  CHECK(model::flops_parameters(llama2_7b()) == 6738415616.0 - 32000.0 * 4096);
}

TEST_CASE("plan: llama's activation inventory, buffer by buffer", "[plan][llama]") {
  // b 2, s 16, h 32, f 48, a 4, k 2, d 8; N = 32 tokens.
  const std::int64_t N = 32, h = 32, f = 48, b = 2, s = 16, a = 4, k = 2, d = 8;
  for (const std::string precision : {"fp32", "bf16"}) {
    const std::int64_t e = precision == "fp32" ? 4 : 2;
    for (const int t : {1, 2}) {
      INFO(precision << " tensor " << t);
      const std::int64_t scores = b * (a / t) * s * s * e;
      const auto kept = [&](std::int64_t n) {  // n: tokens of the replicated (or sequence-split) tensors
        return 4 * n * h * e + 2 * n * 4                                         // x, ln_1, x1, ln_2; RMSNorm 1/rms
               + N * ((a + 2 * k) * d / t) * e + N * (a / t) * 4 + N * (h / t) * e  // q|k|v (GQA), lse, context
               + N * (2 * f / t) * e;                                             // gate|up
      };
      CHECK(total_bytes(layer_activations(small_llama(t, false, Recompute::none, precision))) == kept(N) + scores);
      CHECK(total_bytes(layer_activations(small_llama(t, false, Recompute::selective, precision))) == kept(N));
      CHECK(total_bytes(layer_activations(small_llama(t, true, Recompute::selective, precision))) == kept(N / t));
      const Config full = small_llama(t, true, Recompute::full, precision);
      CHECK(total_bytes(layer_activations(full)) == (N / t) * h * e);
      CHECK(total_bytes(recompute_working_set(full)) == kept(N / t) - (N / t) * h * e);
      // Without grouping the QKV output is 3h/t wide, as GPT-2's.
      const Config mha = small_llama(t, false, Recompute::selective, precision, 4);
      CHECK(total_bytes(layer_activations(mha)) == kept(N) + N * (2 * 2 * d / t) * e);
      // The head: ln_f output and its 1/rms (RMSNorm: no mean), the logits, 4 loss vectors.
      const std::int64_t vocab_padded = (250 + 8 * t - 1) / (8 * t) * (8 * t);
      CHECK(total_bytes(head_buffers(small_llama(t, false, Recompute::none, precision))) ==
            N * h * e + N * 4 + N * (vocab_padded / t) * e + 4 * N * 4);
    }
  }
}

// The plan's llama inventory is the model's, byte for byte (as "plan: the activation inventory
// is what a model stage allocates" for GPT-2): every buffer a llama model stage allocates is
// counted, every recompute mode, with and without sequence parallelism and grouping, fp32 and
// bf16. The rotary tables are the stage's scratch.
TEST_CASE("plan: the llama inventory is what a llama model stage allocates", "[plan][llama][mpi]") {
  const int n = test::world_size();
  for (const int t : {1, n}) {
    if (t > 2) continue;
    auto tp = test::tp_group(t);
    for (const std::string precision : {"fp32", "bf16"})
      for (const bool sp : {false, true})
        for (const int kv : {2, 4})
          for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
            for (const bool flash : {false, true}) {
            Config c = small_llama(t, sp, r, precision, kv, flash);
            c.shape.sequence_parallel = sp;
            INFO("tensor " << t << ", " << precision << (sp ? ", sequence parallel" : "") << ", kv_heads " << kv
                           << ", recompute " << recompute_name(r) << (flash ? ", flash" : ", batched"));
            const auto count = [&](auto tag) {
              using T = decltype(tag);
              model::GptModel<T> m(c.shape, c.micro_batch, *tp, 1, model::PipelineStage{}, r);
              m.reserve_slots(2);
              std::size_t column_sums = 0;
              for (const auto& e : m.workspace().entries())
                if (e.name == "column_sums") column_sums += e.bytes;
              return static_cast<std::int64_t>(m.workspace().total_bytes() - column_sums);
            };
            const std::int64_t measured = precision == "fp32" ? count(float()) : count(kx::bf16());
            const std::int64_t planned = stage_activation_bytes(c, c.shape.layers, 2) + total_bytes(head_buffers(c)) +
                                         total_bytes(workspace_buffers(c));
            CHECK(planned == measured);
          }
  }
}

// Each rank's llama parameters and their bytes are what a TrainingRun allocates (untied: lm_head
// on the last stage; tied: the embedding's copy there).
TEST_CASE("plan: each rank's llama parameters equal what a TrainingRun allocates", "[plan][llama][mpi]") {
  const int n = test::world_size();
  for (int tensor = 1; tensor <= std::min(n, 2); tensor *= 2)
    for (const bool tied : {false, true}) {
      const int pipeline = n / tensor;
      io::Deck deck = test::pipeline_deck(tensor, pipeline, 1, 2);
      deck.model.architecture = "llama";
      deck.model.take_preset_defaults();
      deck.model.kv_heads = 2;
      deck.model.tie_embeddings = tied;
      deck.model.vocab_size = 250;
      INFO("tensor " << tensor << " x pipeline " << pipeline << (tied ? ", tied" : ", untied"));
      parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{tensor, pipeline, 1});
      train::RunOptions options;
      options.synthetic_tokens = 4096;
      const Config c = config_of(deck);
      const StageParameters stages = stage_parameters(c.shape, pipeline);
      train::TrainingRun<float> run(deck, topo, options);
      CHECK(run.parameter_memory().parameters == stages.of(topo.coords().pp));
      CHECK(std::int64_t(run.parameter_memory().total()) == parameter_bytes(stages.of(topo.coords().pp), c).total());
    }
}
