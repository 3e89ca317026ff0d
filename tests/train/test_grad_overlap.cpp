// The data-parallel gradient reduction overlaps the backward: each bucket's all-reduce (with the
// distributed optimizer: reduce-scatter) starts (on its own stream on NCCL; as a started MPI
// request on host backends) as soon as the bucket is final, before the backward of the next
// bucket runs, and the gradients equal those of the reduction run after the whole backward.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "catch.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;

namespace {

// What Kokkos Tools see during a step: 'k' for every kernel launch, 's' for every start of a
// bucket's all-reduce or reduce-scatter (GradientReducer's regions).
std::string* g_trace = nullptr;
void on_kernel(const char*, const std::uint32_t, std::uint64_t*) {
  if (g_trace) *g_trace += 'k';
}
void on_region(const char* name) {
  if (g_trace && (std::strcmp(name, train::GradientReducer<float>::launch_region_name) == 0 ||
                  std::strcmp(name, train::GradientReducer<float>::reduce_scatter_region_name) == 0))
    *g_trace += 's';
}

struct TracedStep {
  std::string trace;
  std::vector<std::vector<float>> buckets;  // the reduced flat gradients (this rank's shard of them)
};

TracedStep traced_step(const io::Deck& deck, bool overlap) {
  parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{1, 1, deck.parallel.data});
  train::TrainingRun run(deck, topo, train::RunOptions{schedule::Schedule::one_f_one_b, overlap});
  TracedStep out;
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(on_kernel);
  Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(on_kernel);
  Kokkos::Tools::Experimental::set_begin_parallel_scan_callback(on_kernel);
  Kokkos::Tools::Experimental::set_push_region_callback(on_region);
  g_trace = &out.trace;
  run.compute_gradients(0);
  g_trace = nullptr;
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(nullptr);
  Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(nullptr);
  Kokkos::Tools::Experimental::set_begin_parallel_scan_callback(nullptr);
  Kokkos::Tools::Experimental::set_push_region_callback(nullptr);
  for (auto& b : run.model().buckets()) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.shard_grads());
    out.buckets.emplace_back(h.data(), h.data() + h.span());
  }
  return out;
}

// Kernels launched between the i-th and the (i+1)-th all-reduce start.
std::vector<int> kernels_between_starts(const std::string& trace) {
  std::vector<int> between;
  const auto first = trace.find('s');
  for (std::size_t i = first; i != std::string::npos && i < trace.size();) {
    const auto next = trace.find('s', i + 1);
    if (next == std::string::npos) break;
    between.push_back(static_cast<int>(next - i - 1));
    i = next;
  }
  return between;
}

}  // namespace

TEST_CASE("each gradient bucket's all-reduce starts before the backward of the next bucket", "[train][overlap][mpi]") {
  const int n = test::world_size();
  if (n < 2) return;  // nothing to reduce on one rank
  io::Deck deck = test::small_deck(1, n, 1);
  deck.model.layers = 4;  // six buckets: embedding, four blocks, head
  deck.optimizer.distributed = GENERATE(false, true);
  INFO((deck.optimizer.distributed ? "reduce-scatter (distributed optimizer)" : "all-reduce"));
  const TracedStep overlapped = traced_step(deck, true);
  const TracedStep after = traced_step(deck, false);
  const std::size_t buckets = overlapped.buckets.size();
  INFO("overlapped trace: " << overlapped.trace);
  INFO("non-overlapped trace: " << after.trace);
  CHECK(std::count(overlapped.trace.begin(), overlapped.trace.end(), 's') == static_cast<long>(buckets));
  CHECK(std::count(after.trace.begin(), after.trace.end(), 's') == static_cast<long>(buckets));
  // Overlapped: after every start but the last, backward kernels of later buckets run before
  // the next start. Not overlapped: all starts come together after the backward.
  const auto gaps = kernels_between_starts(overlapped.trace);
  REQUIRE(gaps.size() == buckets - 1);
  for (std::size_t i = 0; i < gaps.size(); ++i) {
    INFO("between start " << i << " and " << i + 1);
    CHECK(gaps[i] > 0);
  }
  for (int gap : kernels_between_starts(after.trace)) CHECK(gap == 0);
  CHECK(overlapped.trace.find('s') < overlapped.trace.rfind('k'));  // the first start is not at the end
  // The same reduced gradients, bit for bit.
  REQUIRE(after.buckets.size() == buckets);
  for (std::size_t b = 0; b < buckets; ++b) CHECK(overlapped.buckets[b] == after.buckets[b]);
}
