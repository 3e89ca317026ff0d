// The memory ledger: Kokkos allocations booked by the category of the scope around them, with
// exact bytes, frees subtracted, high-water marks kept; a training run's categories equal the
// model's own accounting (parameter buffers, Workspace, stored pipeline inputs, checkpoint host
// copies) and nothing is left when it is gone; the resident set; the reported fields.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstring>
#include <vector>

#include "catch.hpp"
#include "src/train/memory_metrics.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "src/train/training_run.hpp"
#include "src/util/memory_ledger.hpp"
#include "src/util/resident_memory.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;
using util::MemoryCategory;

namespace {

using Bytes = kernels::Vector<float>;

// The ledger's counters, once it is known to be booking (a test that replaced its Kokkos Tools
// callbacks and did not restore them would make every later count wrong).
util::MemoryUsage booking_ledger_usage() {
  REQUIRE(util::memory_ledger().installed());
  return util::memory_ledger().usage();
}

// What was booked in each category between `before` and now.
struct Delta {
  util::MemoryUsage before = booking_ledger_usage();
  std::size_t operator[](MemoryCategory c) const {
    return util::memory_ledger().current(c) - before[c];
  }
};

template <class T>
io::Deck deck_for(int tensor, int pipeline, int data, const std::string& extra = "") {
  io::Deck deck = test::pipeline_deck(tensor, pipeline, data, 2, 8, extra);
  deck.training.precision = std::is_same<T, float>::value ? "fp32" : "bf16";
  return deck;
}

// Bytes of the Workspace's buffers of category c as Kokkos allocates them: each rounded up to a
// multiple of 8 (Workspace::bytes counts elements × size); the buffers inside the blocks' shared
// region are the region's allocation.
template <class T>
std::size_t allocated_bytes(const model::Workspace<T>& ws, model::BufferCategory c) {
  std::size_t n = 0;
  for (const auto& e : ws.entries()) n += e.category == c && !e.in_region ? (e.bytes + 7) / 8 * 8 : 0;
  return n;
}

// The model's own accounting of what it allocated, checked against what the ledger booked:
// parameters (TrainingRun::parameter_memory, the fp32 master under optimizer state; every
// bucket of these shapes is a multiple of 8 bytes), the stage's Workspace (activation and
// stage tensors under activations, scratch under workspace) and the stored pipeline inputs of a
// non-first stage (TrainingRun::memory).
template <class T>
void check_run_categories(train::TrainingRun<T>& run, const Delta& d) {
  const train::ParameterMemory pm = run.parameter_memory();
  const auto& ws = run.model().workspace();
  CHECK(d[MemoryCategory::weights] == pm.weight);
  CHECK(d[MemoryCategory::gradients] == pm.gradient);
  CHECK(d[MemoryCategory::optimizer_state] == pm.master + pm.optimizer);
  CHECK(d[MemoryCategory::activations] == allocated_bytes(ws, model::BufferCategory::activation) +
                                              allocated_bytes(ws, model::BufferCategory::stage));
  CHECK(d[MemoryCategory::workspace] == allocated_bytes(ws, model::BufferCategory::scratch));
  CHECK(d[MemoryCategory::checkpoint] == 0);
}

}  // namespace

TEST_CASE("allocations are booked under their scope's category with their bytes, frees subtracted",
          "[memory]") {
  auto& ledger = util::memory_ledger();
  const Delta d;
  {
    util::MemoryCategoryScope as(MemoryCategory::activations);
    Bytes a("a", 1000);
    CHECK(d[MemoryCategory::activations] == 4000);
    CHECK(ledger.total() == d.before.total + 4000);
    CHECK(ledger.high_water(MemoryCategory::activations) >= d.before[MemoryCategory::activations] + 4000);
    // Kokkos reports a View's bytes rounded up to a multiple of 8.
    Bytes odd("odd", 3);
    CHECK(d[MemoryCategory::activations] == 4000 + 16);
    for (int c = 0; c < util::kMemoryCategoryCount; ++c)
      if (static_cast<MemoryCategory>(c) != MemoryCategory::activations) CHECK(d[static_cast<MemoryCategory>(c)] == 0);
  }
  CHECK(d[MemoryCategory::activations] == 0);
  CHECK(ledger.total() == d.before.total);
  {
    Bytes outside("outside", 10);  // no scope: other
    CHECK(d[MemoryCategory::other] == 40);
  }
  CHECK(d[MemoryCategory::other] == 0);
  // A release the ledger never saw allocated (made before install()) changes nothing.
  int unknown = 0;
  ledger.deallocated(&unknown);
  CHECK(ledger.usage().current == d.before.current);
}

TEST_CASE("high-water marks outlive the frees and restart from reset_high_water", "[memory]") {
  auto& ledger = util::memory_ledger();
  ledger.reset_high_water();
  const Delta d;
  CHECK(ledger.high_water() == d.before.total);
  CHECK(ledger.high_water(MemoryCategory::workspace) == d.before[MemoryCategory::workspace]);
  util::MemoryCategoryScope as(MemoryCategory::workspace);
  { Bytes big("big", 4096); }
  Bytes small("small", 256);
  CHECK(d[MemoryCategory::workspace] == 1024);
  CHECK(ledger.high_water(MemoryCategory::workspace) == d.before[MemoryCategory::workspace] + 16384);
  CHECK(ledger.high_water() == d.before.total + 16384);
  CHECK(ledger.usage().peak(MemoryCategory::workspace) == d.before[MemoryCategory::workspace] + 16384);
  ledger.reset_high_water();
  CHECK(ledger.high_water(MemoryCategory::workspace) == d.before[MemoryCategory::workspace] + 1024);
  CHECK(ledger.high_water() == d.before.total + 1024);
  // The memory spaces add up to the total, peak to peak at least.
  std::size_t spaces = 0;
  for (const util::SpaceUsage& s : ledger.spaces()) {
    CHECK(s.high_water >= s.current);
    spaces += s.current;
  }
  CHECK(spaces == ledger.total());
}

TEST_CASE("scopes nest: the innermost category wins, the outer one comes back", "[memory]") {
  const Delta d;
  CHECK(util::current_memory_category() == MemoryCategory::other);
  {
    util::MemoryCategoryScope outer(MemoryCategory::weights);
    Bytes w("w", 8);
    {
      util::MemoryCategoryScope inner(MemoryCategory::gradients);
      CHECK(util::current_memory_category() == MemoryCategory::gradients);
      Bytes g("g", 16);
      inner.change(MemoryCategory::optimizer_state);
      Bytes m("m", 32);
      CHECK(d[MemoryCategory::gradients] == 64);
      CHECK(d[MemoryCategory::optimizer_state] == 128);
    }
    CHECK(util::current_memory_category() == MemoryCategory::weights);
    Bytes w2("w2", 2);
    CHECK(d[MemoryCategory::weights] == 32 + 8);
    CHECK(d[MemoryCategory::gradients] == 0);
  }
  CHECK(util::current_memory_category() == MemoryCategory::other);
  CHECK(d[MemoryCategory::weights] == 0);
}

TEST_CASE("other Kokkos Tools callbacks set and cleared leave the ledger booking", "[memory]") {
  // What tests/train/test_grad_overlap.cpp does around a step.
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback([](const char*, std::uint32_t, std::uint64_t*) {});
  Kokkos::Tools::Experimental::set_push_region_callback([](const char*) {});
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(nullptr);
  Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
  const Delta d;
  util::MemoryCategoryScope as(MemoryCategory::communication);
  Bytes c("c", 100);
  CHECK(d[MemoryCategory::communication] == 400);
}

TEMPLATE_TEST_CASE("a training run's categories equal its own accounting, and nothing is left when it is gone",
                   "[memory][train]", float, kx::bf16) {
  using T = TestType;
  parallel::Topology topo(MPI_COMM_SELF, parallel::Layout{1, 1, 1});
  const io::Deck deck = deck_for<T>(1, 1, 1);
  { train::TrainingRun<T>(deck, topo).step(0); }  // Kokkos' own lazily grown buffers, once
  const Delta d;
  {
    train::TrainingRun<T> run(deck, topo);
    check_run_categories(run, d);
    CHECK(d[MemoryCategory::communication] == 0);
    run.step(0);
    run.step(1);
    check_run_categories(run, d);  // a step allocates nothing in these categories
    CHECK(run.parameter_memory().per_parameter() == (std::is_same<T, float>::value ? 16.0 : 18.0));
  }
  for (int c = 0; c < util::kMemoryCategoryCount; ++c) {
    INFO(util::memory_category_name(static_cast<MemoryCategory>(c)));
    CHECK(d[static_cast<MemoryCategory>(c)] == 0);
  }
}

TEST_CASE("a checkpoint's host copies are booked under checkpoint and released after the write", "[memory][checkpoint]") {
  test::SharedTempDir dir("tptrain_memory");
  parallel::Topology topo(MPI_COMM_SELF, parallel::Layout{1, 1, 1});
  const io::Deck deck = deck_for<kx::bf16>(1, 1, 1, "[checkpoint]\ndir = \"" + dir.path() + "\"\n");
  train::TrainingRun<kx::bf16> run(deck, topo);
  run.step(0);
  auto& ledger = util::memory_ledger();
  ledger.reset_high_water();
  const Delta d;
  checkpoint::save_checkpoint(run.model(), deck, topo, 1, 0);
  CHECK(d[MemoryCategory::checkpoint] == 0);
  // The fp32 master weights and both moments, once each, on the host while the file is written.
  const train::ParameterMemory pm = run.parameter_memory();
  CHECK(ledger.high_water(MemoryCategory::checkpoint) == d.before[MemoryCategory::checkpoint] + pm.master + pm.optimizer);
  CHECK(ledger.high_water() >= d.before.total + pm.master + pm.optimizer);
}

TEST_CASE("a pipeline stage books the activation slots of its micro-batches in flight as activations",
          "[memory][pipeline][mpi]") {
  const int n = test::world_size();
  if (n < 2 || n % 2 != 0) return;
  const io::Deck deck = deck_for<float>(1, 2, n / 2);
  parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{1, 2, n / 2});
  const Delta d;
  train::TrainingRun<float> run(deck, topo);
  const std::size_t before_step = d[MemoryCategory::activations];
  run.step(0);
  const int in_flight = std::min(2 - topo.coords().pp, run.micro_batches());
  INFO("stage " << topo.coords().pp << ", " << in_flight << " micro-batches in flight");
  CHECK(run.model().activation_slots() == in_flight);
  check_run_categories(run, d);
  CHECK(d[MemoryCategory::activations] == before_step);  // every slot allocated before the first step
}

TEST_CASE("the resident set is read and grows with touched memory", "[memory]") {
  const util::ResidentMemory before = util::resident_memory();
  REQUIRE(before.current > 0);
  CHECK(before.peak >= before.current);
  std::vector<char> block(std::size_t(64) << 20);
  std::memset(block.data(), 1, block.size());  // resident only once touched
  const util::ResidentMemory after = util::resident_memory();
  CHECK(after.current >= before.current + (std::size_t(60) << 20));
  CHECK(after.peak >= after.current);
  CHECK(block[block.size() / 2] == 1);
}

TEST_CASE("the measured memory fields: rank's own values and the maximum over ranks", "[memory][mpi]") {
  const train::NamedBytes fields = train::measured_memory_fields(MPI_COMM_WORLD, true);
  const util::MemoryUsage u = util::memory_ledger().usage();
  std::vector<std::string> names;
  for (const auto& f : fields) names.push_back(f.first);
  CHECK(names == std::vector<std::string>{
                     "mem_weights_bytes", "mem_gradients_bytes", "mem_optimizer_state_bytes", "mem_activations_bytes",
                     "mem_workspace_bytes", "mem_communication_bytes", "mem_checkpoint_bytes", "mem_other_bytes",
                     "mem_weights_peak_bytes", "mem_gradients_peak_bytes", "mem_optimizer_state_peak_bytes",
                     "mem_activations_peak_bytes", "mem_workspace_peak_bytes", "mem_communication_peak_bytes",
                     "mem_checkpoint_peak_bytes", "mem_other_peak_bytes", "mem_peak_bytes", "mem_peak_bytes_max_rank",
                     "mem_rss_bytes", "mem_peak_rss_bytes", "mem_peak_rss_bytes_max_rank"});
  const auto value = [&](const std::string& name) {
    for (const auto& f : fields)
      if (f.first == name) return f.second;
    return std::int64_t(-1);
  };
  CHECK(value("mem_other_bytes") == static_cast<std::int64_t>(u[MemoryCategory::other]));
  CHECK(value("mem_weights_peak_bytes") == static_cast<std::int64_t>(u.peak(MemoryCategory::weights)));
  CHECK(value("mem_peak_bytes") == static_cast<std::int64_t>(u.total_high_water));
  // The maximum over ranks, computed another way: gathered to every rank.
  std::vector<long long> all(static_cast<std::size_t>(test::world_size()));
  long long mine = static_cast<long long>(u.total_high_water);
  MPI_Allgather(&mine, 1, MPI_LONG_LONG, all.data(), 1, MPI_LONG_LONG, MPI_COMM_WORLD);
  CHECK(value("mem_peak_bytes_max_rank") == *std::max_element(all.begin(), all.end()));
  CHECK(value("mem_peak_rss_bytes_max_rank") >= value("mem_peak_rss_bytes"));
  CHECK(value("mem_peak_rss_bytes") > 0);
  // Without the per-category peaks: the fields metrics.jsonl gets.
  CHECK(train::measured_memory_fields(MPI_COMM_WORLD).size() == fields.size() - util::kMemoryCategoryCount);
  CHECK_THAT(train::measured_memory_summary(), test::contains("optimizer_state"));
}
