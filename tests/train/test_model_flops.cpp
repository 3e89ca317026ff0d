// The model FLOP count behind MFU (tptrain bench): GPT-2 124M's published figures; the
// recomputed FLOPs behind HFU.
#include "catch.hpp"
#include "src/train/deck_shape.hpp"
#include "src/train/model_flops.hpp"
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
  CHECK(train::flops_parameters(s) == 124439808.0 - 1024.0 * 768.0);
  CHECK(train::training_flops_per_token(s) == 6.0 * 123653376.0 + 12.0 * 12 * 1024 * 768);
  // A recomputed forward is a third of the training step's matrix work, less what the forward
  // does not multiply: biases and LayerNorm weights (about 0.1 % of N here).
  const double forward = train::forward_flops_per_token(s, 12, true);
  CHECK(forward * 3 == Approx(train::training_flops_per_token(s)).epsilon(2e-3));
  CHECK(train::forward_flops_per_token(s, 6, false) * 2 ==
        Approx(train::forward_flops_per_token(s, 12, false)));
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
    const model::GptShape shape = train::shape_of(deck);
    auto& m = run.model();
    const std::int64_t fences = clock.fences();
    run.step(0);
    CHECK(clock.fences() == fences);  // regions only: no fence at any phase boundary
    const double micro_batches = deck.grad_accum_steps(), layers = shape.layers;
    const double scores = mode == "none" ? 0.0 : layers * micro_batches;
    const double blocks = mode == "full" ? layers * micro_batches : 0.0;
    CHECK(double(m.recomputed_scores()) == scores);
    CHECK(double(m.recomputed_blocks()) == blocks);
    CHECK(m.recomputed_heads() == 0);
    const train::Recomputed r{double(m.recomputed_blocks()), double(m.recomputed_heads()),
                              double(m.recomputed_scores())};
    const double S = shape.seq_length, H = shape.hidden, F = shape.ffn_hidden;
    const double tokens = double(m.tokens());  // per micro-batch
    const double expected = tokens * (scores * 2 * S * H + blocks * (2 * (4 * H * H + 2 * H * F) + 4 * S * H));
    CHECK(train::recomputed_flops(shape, m.tokens(), r) == Approx(expected));
    if (mode == "none") CHECK(train::recomputed_flops(shape, m.tokens(), r) == 0.0);  // HFU = MFU
    else CHECK(train::recomputed_flops(shape, m.tokens(), r) > 0.0);                  // HFU > MFU
    // Timing on: every phase boundary fences the device.
    clock.set_timing(true);
    run.step(1);
    clock.set_timing(false);
    CHECK(clock.fences() > fences);
  }
}
