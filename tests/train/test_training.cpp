// The training step: determinism, replicated parameters staying identical across the TP group,
// layouts reproducing the one-rank loss curve, the loss falling, LR schedule and clipping.
#include <cmath>
#include <fmt/format.h>
#include <mpi.h>

#include "catch.hpp"
#include "io/deck.hpp"
#include "src/train/training_run.hpp"
#include "tests/model/model_test_util.hpp"
#include "tests/train/per_parameter_optimizer.hpp"
#include "tests/train/train_test_util.hpp"

using tptrain::test::loss_curve;
using tptrain::test::small_deck;
using namespace tptrain;



TEST_CASE("learning-rate schedule: warmup, cosine and linear decay", "[train][schedule]") {
  train::LrSchedule s{1.0, 0.1, 10, 110, "cosine"};
  CHECK(s.at(0) == Approx(0.1));
  CHECK(s.at(4) == Approx(0.5));
  CHECK(s.at(9) == Approx(1.0));
  CHECK(s.at(10) == Approx(1.0));                                        // start of decay
  CHECK(s.at(109) == Approx(0.1));                                       // last step: min_lr
  CHECK(s.at(59) == Approx(0.1 + 0.45 * (1 + std::cos(M_PI * 49.0 / 99.0))));
  train::LrSchedule lin{1.0, 0.0, 0, 11, "linear"};
  CHECK(lin.at(0) == Approx(1.0));
  CHECK(lin.at(5) == Approx(0.5));
  CHECK(lin.at(10) == Approx(0.0).margin(1e-15));
  train::LrSchedule flat{2.0, 0.0, 2, 10, "constant"};
  CHECK(flat.at(0) == Approx(1.0));
  CHECK(flat.at(7) == Approx(2.0));
}

TEST_CASE("a non-finite loss or gradient norm stops the run naming the step", "[train]") {
  CHECK_NOTHROW(train::check_finite(3, 1.0, 2.0));
  CHECK_THROWS_WITH(train::check_finite(17, std::nan(""), 1.0), test::contains("step 17"));
  CHECK_THROWS_WITH(train::check_finite(5, 1.0, INFINITY), test::contains("step 5"));
}

TEST_CASE("global gradient norm counts every logical element once, and clipping", "[train][clip][mpi]") {
  const kx::ExecSpace exec;
  for (int tp_size : {1, 2, 4}) {
    if (test::world_size() % tp_size != 0) continue;
    INFO("tensor = " << tp_size);
    auto tp = test::tp_group(tp_size);
    model::GptModel<float> m(test::tiny_shape(tp_size), 1, *tp, 1);
    auto params = m.parameters();
    // Every gradient element = 0.5 (padding rows included: they exist in the padded layout).
    double expected = 0.0;
    for (auto* p : params) {
      kernels::fill(exec, p->grad_vector(), 0.5f);
      double n = 1;
      for (auto d : p->shape) n *= static_cast<double>(d);
      expected += 0.25 * n;
    }
    const double norm = test::global_grad_norm(exec, params, *tp);
    CHECK(norm == Approx(std::sqrt(expected)).epsilon(1e-6));
    test::scale_gradients(exec, params, static_cast<float>(1.0 / (norm + 1e-6)));
    CHECK(test::global_grad_norm(exec, params, *tp) == Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("the bucket optimizer equals the per-parameter norm, clipping and AdamW", "[train][clip][mpi]") {
  const kx::ExecSpace exec;
  for (int tp_size : {1, 2}) {
    if (test::world_size() % tp_size != 0) continue;
    INFO("tensor = " << tp_size);
    auto tp = test::tp_group(tp_size);
    // Two identical stages (same seed): one stepped per bucket, one per parameter.
    model::GptModel<float> a(test::tiny_shape(tp_size), 1, *tp, 7), b(test::tiny_shape(tp_size), 1, *tp, 7);
    auto pa = a.parameters(), pb = b.parameters();
    for (std::size_t i = 0; i < pa.size(); ++i) {  // varied gradients, the same in both
      auto h = Kokkos::create_mirror_view(pa[i]->grad);
      for (std::size_t j = 0; j < h.extent(0); ++j) h(j) = 0.01f * static_cast<float>((i * 31 + j * 7) % 23) - 0.1f;
      Kokkos::deep_copy(pa[i]->grad, h);
      Kokkos::deep_copy(pb[i]->grad, h);
    }
    auto self = test::tp_group(1);
    train::BucketOptimizer<float> opt(a);
    const double norm = opt.grad_norm(exec, *tp, *self);
    const double reference = test::global_grad_norm(exec, b.unique_parameters(), *tp);
    CHECK(norm == Approx(reference).epsilon(1e-12));
    const train::AdamWConfig c{0.9, 0.95, 1e-8, 0.1};
    const float clip = static_cast<float>(0.5 / (norm + 1e-6));
    opt.step(exec, c, 1e-3, 1, clip);
    test::scale_gradients(exec, pb, clip);
    test::adamw_step(exec, pb, c, 1e-3, 1);
    for (std::size_t i = 0; i < pa.size(); ++i) {
      INFO(pa[i]->name);
      auto va = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), pa[i]->value);
      auto vb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), pb[i]->value);
      bool same = true;
      for (std::size_t j = 0; j < va.extent(0); ++j) same = same && va(j) == vb(j);
      CHECK(same);  // bit for bit
    }
  }
}

namespace {
std::vector<std::string>* g_allocations = nullptr;  // labels of the Views allocated while set
Kokkos::Tools::allocateDataFunction g_ledger_hook = nullptr;  // the memory ledger's, passed on
void count_allocation(const Kokkos::Profiling::SpaceHandle space, const char* label, const void* ptr,
                      const std::uint64_t bytes) {
  if (g_allocations != nullptr) g_allocations->emplace_back(label);
  if (g_ledger_hook != nullptr) g_ledger_hook(space, label, ptr, bytes);
}
}  // namespace

TEST_CASE("a training step allocates no device memory once the run is built", "[train][workspace]") {
  io::Deck deck = small_deck(1, 1, 4);
  deck.training.micro_batch = 8;  // 128 tokens: the two-stage column sums need their scratch
  parallel::Topology topo(MPI_COMM_SELF, parallel::Layout{1, 1, 1});
  std::vector<std::string> allocations;
  // Kokkos Tools' allocation hook: what a memory tool sees (in front of the memory ledger's).
  g_ledger_hook = Kokkos::Tools::Experimental::get_callbacks().allocate_data;
  Kokkos::Tools::Experimental::set_allocate_data_callback(count_allocation);
  g_allocations = &allocations;
  std::size_t at_construction = 0, in_first_step = 0;
  {
    train::TrainingRun run(deck, topo);
    at_construction = allocations.size();
    run.step(0);  // first touch of the pipeline stash etc. may allocate
    in_first_step = allocations.size() - at_construction;
    allocations.clear();
    run.step(1);
    run.step(2);
  }
  g_allocations = nullptr;
  Kokkos::Tools::Experimental::set_allocate_data_callback(g_ledger_hook);
  REQUIRE(at_construction > 0);  // the hook works: building the model allocates
  INFO("first step allocated " << in_first_step);
  std::string labels;
  for (const auto& l : allocations) labels += l + " ";
  INFO("allocated in steps 2-3: " << labels);
  CHECK(allocations.empty());
}

TEST_CASE("training is deterministic and the loss falls", "[train]") {
  const io::Deck deck = small_deck(1, 1, 30);
  const auto a = loss_curve(deck, MPI_COMM_SELF, 30);
  const auto b = loss_curve(deck, MPI_COMM_SELF, 5);
  for (int s = 0; s < 5; ++s) CHECK(a[s] == b[s]);  // bit for bit
  CHECK(a.front() > 5.0);                           // ~ log 256 at the start
  CHECK(a.back() < a.front() - 2.0);
}

TEST_CASE("layouts reproduce the one-rank loss curve", "[train][layouts][mpi]") {
  const int n = test::world_size();
  const int steps = 8;
  const auto reference = loss_curve(small_deck(1, 1, steps), MPI_COMM_SELF, steps);
  for (int tensor = 1; tensor <= n; tensor *= 2) {
    if (n % tensor != 0) continue;
    const int data = n / tensor;
    INFO("tensor " << tensor << " x data " << data);
    const auto curve = loss_curve(small_deck(tensor, data, steps), MPI_COMM_WORLD, steps);
    for (int s = 0; s < steps; ++s) CHECK(std::fabs(curve[s] - reference[s]) <= 1e-5 * reference[s]);
  }
}

TEST_CASE("replicated parameters stay bit-identical across the TP group for 50 steps", "[train][mpi]") {
  const int n = test::world_size();
  const io::Deck deck = small_deck(n, 1, 50);
  parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{n, 1, 1});
  train::TrainingRun run(deck, topo);
  for (int s = 0; s < 50; ++s) run.step(s);
  int replicated = 0;
  for (auto* p : run.model().parameters()) {
    if (!p->replicated()) continue;
    ++replicated;
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p->value);
    std::vector<float> lo(h.data(), h.data() + h.size()), hi = lo;
    MPI_Allreduce(MPI_IN_PLACE, lo.data(), static_cast<int>(lo.size()), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, hi.data(), static_cast<int>(hi.size()), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
    INFO(p->name);
    CHECK(lo == hi);
  }
  // Every replicated tensor of the model was compared: today the position embedding; per layer two
  // LayerNorms and the two row-parallel biases; ln_f.
  int listed = 0;
  for (const model::LogicalTensor& t : model::logical_tensors(run.model().shape()))
    listed += model::model_parameter(run.model().shape(), t.name).split == model::TensorSplit::replicated ? 1 : 0;
  CHECK(replicated == listed);
  CHECK(replicated > 0);
}
