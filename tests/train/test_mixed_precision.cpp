// Mixed-precision training (bf16/fp16 compute, fp32 master weights, gradients and moments):
// memory per parameter, the compute copy rounded from the master, bf16 against fp32, the fp16
// loss scaler skipping an overflowing step on every rank, and checkpoints across precisions.
#include <cmath>
#include <cstring>
#include <map>
#include <mpi.h>
#include <vector>

#include "catch.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "src/train/training_run.hpp"
#include "tests/model/model_test_util.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;

namespace {

io::Deck deck_in(const std::string& precision, int tensor, int data, int steps, const std::string& extra = "") {
  io::Deck deck = test::small_deck(tensor, data, steps, extra);
  deck.training.precision = precision;
  return deck;
}

template <class V>
std::vector<double> host_values(const V& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<double> out(h.extent(0));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(static_cast<float>(h(i)));
  return out;
}

// Every parameter's master and compute copies, bit for bit as doubles.
template <class T>
std::vector<double> all_weights(train::TrainingRun<T>& run) {
  std::vector<double> out;
  for (const auto& b : run.model().buckets()) {
    for (double x : host_values(b.master)) out.push_back(x);
    for (double x : host_values(b.values)) out.push_back(x);
  }
  return out;
}

}  // namespace

TEST_CASE("mixed precision keeps fp32 master weights, gradients and moments: 18 bytes per parameter",
          "[train][mixed]") {
  parallel::Topology topo(MPI_COMM_SELF, parallel::Layout{1, 1, 1});
  {
    train::TrainingRun<float> run(deck_in("fp32", 1, 1, 2), topo);
    const auto m = run.parameter_memory();
    CHECK(m.per_parameter() == 16.0);  // weights 4 + gradients 4 + moments 8; the master is the weights
    CHECK(m.master == 0);
  }
  for (const std::string precision : {"bf16", "fp16"}) {
    INFO(precision);
    const auto check = [&](auto& run) {
      const auto m = run.parameter_memory();
      CHECK(m.per_parameter() == 18.0);  // Megatron's 2 + 4 + 4 + 8
      CHECK(m.weight * 2 == m.gradient);
      CHECK(m.master == m.gradient);
      CHECK(m.optimizer == 2 * m.gradient);
      run.step(0);
      run.step(1);
      // After each step the compute copy is the master rounded to nearest even, element by element.
      for (const auto& b : run.model().buckets()) {
        const auto master = host_values(b.master), values = host_values(b.values);
        using T = typename std::decay_t<decltype(b.values)>::non_const_value_type;
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < master.size(); ++i)
          wrong += static_cast<double>(static_cast<float>(T(static_cast<float>(master[i])))) != values[i];
        INFO(b.name);
        CHECK(wrong == 0);
      }
    };
    if (precision == "bf16") {
      train::TrainingRun<kx::bf16> run(deck_in(precision, 1, 1, 2), topo);
      check(run);
    } else {
      io::Deck deck = deck_in(precision, 1, 1, 2);
      deck.training.loss_scale_initial = 1024;
      train::TrainingRun<kx::fp16> run(deck, topo);
      check(run);
    }
  }
}

TEST_CASE("bf16 starts from the fp32 weights and its first losses follow fp32", "[train][mixed]") {
  const int steps = 10;
  const auto fp32 = test::loss_curve<float>(deck_in("fp32", 1, 1, steps), MPI_COMM_SELF, steps);
  const auto bf16 = test::loss_curve<kx::bf16>(deck_in("bf16", 1, 1, steps), MPI_COMM_SELF, steps);
  const auto again = test::loss_curve<kx::bf16>(deck_in("bf16", 1, 1, steps), MPI_COMM_SELF, steps);
  CHECK(bf16 == again);  // deterministic, bit for bit
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s + 1 << ": bf16 " << bf16[s] << ", fp32 " << fp32[s]);
    // bf16 rounding of weights and activations (2^-9 relative each) moves the loss by ~1e-3;
    // a bf16 path that lost fp32 accumulation, or a wrong master update, moves it by far more.
    CHECK(std::fabs(bf16[s] - fp32[s]) <= 1e-2 * fp32[s]);
    CHECK(bf16[s] != fp32[s]);  // it really computed in bf16
  }
  CHECK(bf16.back() < bf16.front() - 0.5);  // and it learns
}

TEST_CASE("fp16: an overflow on one rank skips the step on every rank; the scale halves after the hysteresis",
          "[train][mixed][mpi]") {
  const int n = test::world_size();
  for (int tensor : {1, n}) {
    INFO("tensor " << tensor << " x data " << n / tensor);
    io::Deck deck = deck_in("fp16", tensor, n / tensor, 6);
    deck.training.loss_scale_initial = 1024;  // no overflow of its own on this model
    deck.training.loss_scale_hysteresis = 2;
    parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{tensor, 1, n / tensor});
    train::TrainingRun<kx::fp16> run(deck, topo);
    REQUIRE(run.loss_scaler() != nullptr);
    const train::StepResult clean = run.step(0);
    CHECK_FALSE(clean.skipped);
    CHECK(clean.loss_scale == 1024.0);
    CHECK(std::isfinite(clean.grad_norm));
    for (int s = 1; s <= 2; ++s) {
      INFO("step " << s + 1);
      const auto before = all_weights(run);
      std::vector<double> moments_before;
      for (const auto& b : run.model().buckets())
        for (double x : host_values(b.exp_avg)) moments_before.push_back(x);
      const double loss = run.compute_gradients(s);
      if (topo.world_rank() == n - 1) {  // one gradient element of one rank becomes Inf
        auto& flat = run.model().buckets().front().grads;
        const float inf = INFINITY;
        Kokkos::deep_copy(Kokkos::subview(flat, 0), inf);
      }
      const train::StepResult r = run.update(s, loss);
      CHECK(r.skipped);
      CHECK(r.loss_scale == 1024.0);
      CHECK(all_weights(run) == before);  // weights (master and compute copy) unchanged, bit for bit
      std::vector<double> moments_after;
      for (const auto& b : run.model().buckets())
        for (double x : host_values(b.exp_avg)) moments_after.push_back(x);
      CHECK(moments_after == moments_before);
      // Hysteresis 2: the first overflow keeps the scale, the second halves it.
      CHECK(run.loss_scaler()->scale() == (s == 1 ? 1024.0 : 512.0));
    }
    const train::StepResult after = run.step(3);
    CHECK_FALSE(after.skipped);
    CHECK(after.loss_scale == 512.0);
    // Every rank took the same decisions (the test's CHECKs ran on each); and they agree on the scale.
    double scale = run.loss_scaler()->scale(), lo = scale, hi = scale;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    CHECK(lo == hi);
  }
}

TEST_CASE("bf16 checkpoints resume bit for bit and load into fp32 runs, and the reverse",
          "[train][mixed][checkpoint][mpi]") {
  const int n = test::world_size();
  test::SharedTempDir dir;
  const std::string extra = "[checkpoint]\ndir = \"" + dir.path() + "\"\nkeep = 10\n";
  const int steps = 6, k = 3;
  parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{n, 1, 1});
  const io::Deck bf16_deck = deck_in("bf16", n, 1, steps, extra);
  const io::Deck fp32_deck = deck_in("fp32", n, 1, steps, extra);
  const auto straight = test::loss_curve<kx::bf16>(bf16_deck, MPI_COMM_WORLD, steps);
  std::vector<double> master;
  {
    train::TrainingRun<kx::bf16> first(bf16_deck, topo);
    for (int s = 0; s < k; ++s) first.step(s);
    checkpoint::save_checkpoint(first.model(), bf16_deck, topo, k, 0, first.train_state());
    for (const auto& b : first.model().buckets())
      for (double x : host_values(b.master)) master.push_back(x);
  }
  const std::string file = checkpoint::checkpoint_path(dir.path(), k);
  {  // bf16 resumes bit for bit
    train::TrainingRun<kx::bf16> second(bf16_deck, topo);
    const io::CheckpointMeta meta = checkpoint::load_weights(second.model(), topo, file, true);
    CHECK(meta.precision == "bf16");
    for (int s = k; s < steps; ++s) CHECK(second.step(s).loss == straight[static_cast<std::size_t>(s)]);
  }
  {  // an fp32 run reads the fp32 master weights exactly
    train::TrainingRun<float> fp32(fp32_deck, topo);
    checkpoint::load_weights(fp32.model(), topo, file, true);
    std::vector<double> weights;
    for (const auto& b : fp32.model().buckets())
      for (double x : host_values(b.values)) weights.push_back(x);
    CHECK(weights == master);
    checkpoint::save_checkpoint(fp32.model(), fp32_deck, topo, 100 + k, 0);
  }
  {  // and a bf16 run reads an fp32 checkpoint: its master is the file, its compute copy the rounding
    train::TrainingRun<kx::bf16> back(bf16_deck, topo);
    const io::CheckpointMeta meta = checkpoint::load_weights(back.model(), topo, checkpoint::checkpoint_path(dir.path(), 100 + k));
    CHECK(meta.precision == "fp32");
    std::vector<double> got;
    std::size_t unrounded = 0;
    for (const auto& b : back.model().buckets()) {
      const auto m = host_values(b.master), v = host_values(b.values);
      for (std::size_t i = 0; i < m.size(); ++i) {
        got.push_back(m[i]);
        unrounded += static_cast<double>(static_cast<float>(kx::bf16(static_cast<float>(m[i])))) != v[i];
      }
    }
    CHECK(got == master);
    CHECK(unrounded == 0);
  }
}

TEST_CASE("fp16 resumes bit for bit: the loss scaler's state travels in the checkpoint", "[train][mixed][checkpoint][mpi]") {
  const int n = test::world_size();
  test::SharedTempDir dir;
  const std::string extra = "[checkpoint]\ndir = \"" + dir.path() + "\"\nkeep = 10\n";
  const int steps = 8, k = 5;
  const test::FloatingPointTrapsOff overflow;
  io::Deck deck = deck_in("fp16", 1, n, steps, extra);
  // Overflows at the start (the scale comes down from 2^24 with hysteresis 2), then a growth
  // window of 2 clean steps: the state at step k is none of the initial values.
  deck.training.loss_scale_initial = 16777216.0;
  deck.training.loss_scale_window = 2;
  parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{1, 1, n});
  std::vector<train::StepResult> straight;
  {
    train::TrainingRun<kx::fp16> run(deck, topo);
    for (int s = 0; s < steps; ++s) straight.push_back(run.step(s));
  }
  int skipped = 0;
  for (const auto& r : straight) skipped += r.skipped;
  INFO("skipped " << skipped << " of " << steps);
  CHECK(skipped > 0);
  CHECK(skipped < steps);
  {
    train::TrainingRun<kx::fp16> first(deck, topo);
    for (int s = 0; s < k; ++s) first.step(s);
    checkpoint::save_checkpoint(first.model(), deck, topo, k, 0, first.train_state());
  }
  train::TrainingRun<kx::fp16> second(deck, topo);
  const io::CheckpointMeta meta = checkpoint::load_weights(second.model(), topo, checkpoint::checkpoint_path(dir.path(), k), true);
  CHECK(meta.precision == "fp16");
  second.restore_train_state(meta.train);
  for (int s = k; s < steps; ++s) {
    const train::StepResult r = second.step(s);
    INFO("step " << s + 1);
    CHECK(r.loss == straight[static_cast<std::size_t>(s)].loss);  // bit for bit
    CHECK(r.loss_scale == straight[static_cast<std::size_t>(s)].loss_scale);
    CHECK(r.skipped == straight[static_cast<std::size_t>(s)].skipped);
  }
}

TEST_CASE("fp16: an overflow at the smallest loss scale stops the run on every rank", "[train][mixed][mpi]") {
  const int n = test::world_size();
  io::Deck deck = deck_in("fp16", 1, n, 4);
  deck.training.loss_scale_initial = 1;  // already the minimum (loss_scale_min = 1)
  parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{1, 1, n});
  train::TrainingRun<kx::fp16> run(deck, topo);
  const double loss = run.compute_gradients(0);
  if (topo.world_rank() == 0) {  // one rank overflows: every rank must stop, none may wait
    const float inf = INFINITY;
    Kokkos::deep_copy(Kokkos::subview(run.model().buckets().front().grads, 0), inf);
  }
  CHECK_THROWS_WITH(run.update(0, loss), test::contains("step 1: the fp16 gradients overflow even at the smallest loss "
                                                        "scale, 1 (training.loss_scale_min = 1)"));
}

// The reproducer: a finite checkpoint whose ln_f weight is 1e6 (inf once rounded to
// fp16) makes every fp16 forward non-finite. Skipping such steps walked the scale down while
// training nothing, and a short run exited 0.
TEST_CASE("fp16: a non-finite loss stops the run on every rank (no loss scale changes the forward)",
          "[train][mixed][mpi]") {
  const int n = test::world_size();
  const test::FloatingPointTrapsOff overflow;
  io::Deck deck = deck_in("fp16", 1, n, 4);
  parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{1, 1, n});
  train::TrainingRun<kx::fp16> run(deck, topo);
  const kx::ExecSpace exec;
  for (auto* p : run.model().unique_parameters())
    if (p->name == "ln_f/weight") {
      kernels::scale(exec, p->master_vector(), 1e6f);
      kernels::convert(exec, p->master_vector(), p->value_vector());
    }
  exec.fence();
  CHECK_THROWS_AS(run.step(0), parallel::AgreedError);
  CHECK_THROWS_WITH(run.step(1), test::contains("step 2: the loss is") &&
                                     test::contains("in fp16: the forward pass exceeds fp16's range"));
  CHECK(run.loss_scaler()->scale() == deck.training.loss_scale_initial);  // the scaler was not walked down
}

TEST_CASE("fp16: a restored loss scale below a raised loss_scale_min starts at the minimum, and an overflow there "
          "names the scale used", "[train][mixed][mpi]") {
  const int n = test::world_size();
  const test::FloatingPointTrapsOff overflow;
  io::Deck deck = deck_in("fp16", 1, n, 4);
  deck.training.loss_scale_min = 0x1p30;  // the checkpoint's run had 1 and came down to 2^24
  parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{1, 1, n});
  train::TrainingRun<kx::fp16> run(deck, topo);
  const auto saved = [](double scale) {
    std::int64_t bits = 0;
    std::memcpy(&bits, &scale, sizeof bits);
    return std::map<std::string, std::int64_t>{
        {"loss_scale_bits", bits}, {"loss_scale_growth_tracker", 0}, {"loss_scale_hysteresis_tracker", 2}};
  };
  run.restore_train_state(saved(0x1p24));
  CHECK(run.loss_scaler()->scale() == 0x1p30);
  // 2^30 / 128 tokens seeds the backward with 2^23 > 65504: this model overflows at the minimum.
  CHECK_THROWS_WITH(run.step(0), test::contains("step 1: the fp16 gradients overflow even at the smallest loss "
                                                "scale, 1073741824 (training.loss_scale_min = 1073741824)"));
  SECTION("a saved scale no run writes is refused, naming the attribute") {
    CHECK_THROWS_WITH(run.restore_train_state(saved(NAN)),
                      test::contains("/train attribute loss_scale_bits = ") && test::contains("is the loss scale nan: "
                                                                                             "expected a finite number > 0"));
    CHECK_THROWS_WITH(run.restore_train_state(saved(0.0)),
                      test::contains("/train attribute loss_scale_bits = 0 is the loss scale 0: expected"));
  }
}
