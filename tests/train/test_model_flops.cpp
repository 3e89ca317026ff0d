// The model FLOP count behind MFU (tptrain bench): GPT-2 124M's published figures; the
// recomputed FLOPs behind HFU.
#include "catch.hpp"
#include "src/model/shape_of_deck.hpp"
#include "src/model/model_flops.hpp"
#include "src/util/phases.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;

TEST_CASE("model FLOPs per token: 6N + 12LSH, N without the position embedding", "[bench]") {
  model::GptShape s;  // GPT-2 124M
  s.layers = 12;
  s.hidden = 768;
  s.heads = 12;
  s.ffn_hidden = 3072;
  s.seq_length = 1024;
  s.vocab_size = 50257;
  // 124,439,808 parameters (PyTorch's count of GPT-2 small) less the 1024 x 768 position embedding.
  CHECK(model::flops_parameters(s) == 124439808.0 - 1024.0 * 768.0);
  CHECK(model::training_flops_per_token(s) == 6.0 * 123653376.0 + 12.0 * 12 * 1024 * 768);
  // A recomputed forward is a third of the training step's matrix work, less what the forward
  // does not multiply: biases and LayerNorm weights (about 0.1 % of N here).
  const double forward = model::forward_flops_per_token(s, 12, true);
  CHECK(forward * 3 == Approx(model::training_flops_per_token(s)).epsilon(2e-3));
  CHECK(model::forward_flops_per_token(s, 6, false) * 2 ==
        Approx(model::forward_flops_per_token(s, 12, false)));
}

// A block's FLOPs come from the block descriptor's matrices (model_flops.hpp); the published
// formulas are the independent check: GPT-2 2(4H² + 2HF) + 4SH, Llama 2(H(H + 2·nkv·d) + H² + 3HF)
// + 4SH (grouped-query K and V, three SwiGLU matrices), and a specification between them (GPT-2
// with SwiGLU) the sum of its parts.
TEST_CASE("block FLOPs from the rows equal GPT-2's and Llama's formulas", "[bench]") {
  model::GptShape g;  // GPT-2 124M
  g.layers = 12, g.hidden = 768, g.heads = 12, g.ffn_hidden = 3072, g.seq_length = 1024, g.vocab_size = 50257;
  const double H = 768, F = 3072, S = 1024;
  CHECK(model::block_forward_flops_per_token(g) == 2.0 * (4 * H * H + 2 * H * F) + 4.0 * S * H);
  model::GptShape l;  // Llama 3 8B
  static_cast<model::BlockSpec&>(l) = model::block_preset("llama")->spec;
  l.layers = 32, l.hidden = 4096, l.heads = 32, l.kv_heads = 8, l.ffn_hidden = 14336, l.seq_length = 8192;
  l.vocab_size = 128256;
  const double h = 4096, f = 14336, s = 8192, kv = 8 * 128;
  CHECK(model::block_forward_flops_per_token(l) == 2.0 * (h * (h + 2 * kv) + h * h + 3 * h * f) + 4.0 * s * h);
  model::GptShape gs = g;
  gs.mlp = "swiglu";
  CHECK(model::block_forward_flops_per_token(gs) == 2.0 * (4 * H * H + 3 * H * F) + 4.0 * S * H);
}

// HFU (tptrain bench) adds what recomputation runs again to the model FLOPs; MFU never does. The
// counters come from the model's own backward, the FLOPs from the formulas above: recompute =
// none recomputes nothing (HFU = MFU), selective recomputes Q Kᵀ in every block's backward, full
// also re-runs every block's forward. The phases' fences (tptrain bench --phases) happen only
// while the phase clock times: a step without it issues none.
TEST_CASE("HFU counts selective and full recomputation; untimed phases issue no fences", "[train][bench][mpi]") {
  const int n = test::world_size();
  auto& clock = util::PhaseClock::instance();
  REQUIRE_FALSE(clock.timing());
  for (const std::string mode : {"none", "selective", "full"}) {
    INFO("recompute = " << mode);
    io::Deck deck = test::small_deck(1, n, 2);
    deck.training.recompute = mode;
    parallel::Topology topo(MPI_COMM_WORLD, test::layout_of(deck));
    train::TrainingRun<float> run(deck, topo);
    const model::GptShape shape = model::shape_of(deck);
    auto& m = run.model();
    const std::int64_t fences = clock.fences();
    run.step(0);
    CHECK(clock.fences() == fences);  // regions only: no fence at any phase boundary
    const double micro_batches = deck.grad_accum_steps(), layers = shape.layers;
    // Flash attention recomputes its block scores in every backward; the batched core unless it
    // kept them (recompute = none).
    const double scores = mode == "none" && !shape.flash_attention ? 0.0 : layers * micro_batches;
    const double blocks = mode == "full" ? layers * micro_batches : 0.0;
    CHECK(double(m.recomputed_scores()) == scores);
    CHECK(double(m.recomputed_blocks()) == blocks);
    CHECK(m.recomputed_heads() == 0);
    const model::Recomputed r{double(m.recomputed_blocks()), double(m.recomputed_heads()),
                              double(m.recomputed_scores())};
    const double S = shape.seq_length, H = shape.hidden, F = shape.ffn_hidden;
    const double tokens = double(m.tokens());  // per micro-batch
    const double expected = tokens * (scores * 2 * S * H + blocks * (2 * (4 * H * H + 2 * H * F) + 4 * S * H));
    CHECK(model::recomputed_flops(shape, m.tokens(), r) == Approx(expected));
    if (mode == "none" && !shape.flash_attention) CHECK(model::recomputed_flops(shape, m.tokens(), r) == 0.0);  // HFU = MFU
    else CHECK(model::recomputed_flops(shape, m.tokens(), r) > 0.0);                  // HFU > MFU
    // Timing on: every phase boundary fences the device.
    clock.set_timing(true);
    run.step(1);
    clock.set_timing(false);
    CHECK(clock.fences() > fences);
  }
}

// A mixture of experts (model.mlp = "moe"): a token runs K of the E experts, so a block costs the
// dense SwiGLU block with K times its MLP, plus the router's [E, H] GEMM; the other experts'
// parameters are not in N (Mixtral-8x7B: tests/plan/test_plan_moe.cpp).
TEST_CASE("model FLOPs of a mixture of experts: the router and K of the E experts", "[bench]") {
  model::GptShape dense;
  static_cast<model::BlockSpec&>(dense) = model::block_preset("llama")->spec;
  dense.tie_embeddings = false;
  dense.layers = 2, dense.hidden = 64, dense.heads = 4, dense.kv_heads = 2, dense.ffn_hidden = 96;
  dense.seq_length = 32, dense.vocab_size = 128;
  const double H = 64, F = 96, S = 32, V = 128;
  for (const int E : {1, 4, 8})
    for (int K = 1; K <= E; K *= 2) {
      INFO(E << " experts, " << K << " per token");
      model::GptShape moe = dense;
      moe.mlp = "moe";  // the mixtral preset: llama's block with a mixture of SwiGLU experts
      moe.experts = E;
      moe.experts_per_token = K;
      CHECK(model::block_forward_flops_per_token(moe) ==
            model::block_forward_flops_per_token(dense) + 2.0 * (K - 1) * 3 * H * F + 2.0 * E * H);
      CHECK(model::flops_parameters(moe) == model::flops_parameters(dense) + 2.0 * ((K - 1) * 3 * H * F + E * H));
      CHECK(model::training_flops_per_token(moe) == 6.0 * model::flops_parameters(moe) + 12.0 * 2 * S * H);
      // Only the first K experts of a block count; which K does not matter, they are alike.
      CHECK(model::inactive_expert(moe, "layers/1/mlp/experts/" + std::to_string(E - 1) + "/fc/weight") == (K < E));
      CHECK_FALSE(model::inactive_expert(moe, "mlp/experts/0/proj/weight"));
      CHECK_FALSE(model::inactive_expert(moe, "layers/0/mlp/router/weight"));
    }
  // The dense block's N: q|k|v [128, 64], o_proj, gate|up|down, two norms; ln_f; lm_head (the
  // untied word embedding is a lookup).
  CHECK(model::flops_parameters(dense) == 2.0 * (128 * H + H * H + 3 * H * F + 2 * H) + H + V * H);
}
