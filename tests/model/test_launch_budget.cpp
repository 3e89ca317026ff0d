// Issue 22's launch budget: one transformer layer's forward plus backward issues at most 40
// kernel and BLAS launches on the CUDA code path (the batched attention path, selected here on
// the host), attention included, in the default recompute mode; and the count does not depend
// on S, the micro-batch or the head count. Counted with kernels::LaunchCounting (Kokkos Tools
// callbacks plus the GEMM wrappers' count), one rank.
#include <cstdint>
#include <string>

#include "catch.hpp"
#include "kokkos_kernels/attention_path.hpp"
#include "kokkos_kernels/launch_count.hpp"
#include "tests/model/model_test_util.hpp"

namespace {

using namespace tptrain;
using Real = float;
namespace lc = kernels::launch_count;

constexpr std::int64_t kBudget = 40;  // kernel + BLAS launches per layer, forward + backward

struct LayerCounts {
  kernels::LaunchCounts forward, backward;
};

model::GptShape budget_shape(int heads, int seq, bool flash = false) {
  model::GptShape s;
  s.flash_attention = flash;
  s.layers = 1;
  s.hidden = 64;
  s.heads = heads;
  s.ffn_hidden = 256;
  s.seq_length = seq;
  s.vocab_size = 64;
  s.tensor = 1;
  return s;
}

// One forward and backward of a block, counted. Inputs are zeros: only the launches matter.
LayerCounts count_layer(const model::GptShape& shape, int batch, model::Recompute recompute) {
  auto tp = test::tp_group(1);
  const kx::ExecSpace exec;
  model::Workspace<Real> ws;
  model::TransformerLayer<Real> layer("layers/0", shape, batch, *tp, ws, recompute);
  for (auto* p : layer.parameters()) model::allocate_and_initialise(*p, 7);
  const std::int64_t rows = std::int64_t(batch) * shape.seq_length;
  kernels::Matrix<Real> x("x", rows, shape.hidden), y("y", rows, shape.hidden), dy("dy", rows, shape.hidden),
      dx("dx", rows, shape.hidden);
  exec.fence();
  LayerCounts c;
  {
    kernels::LaunchCounting counting;
    layer.forward(exec, *tp, x, y);
    layer.backward(exec, *tp, dy, x, dx);
    c.forward = lc::at(model::TransformerLayer<Real>::forward_site);
    c.backward = lc::at(model::TransformerLayer<Real>::backward_site);
    CHECK(lc::entries(model::TransformerLayer<Real>::forward_site) == 1);
    CHECK(lc::total().compute() == c.forward.compute() + c.backward.compute());
  }
  exec.fence();
  return c;
}

}  // namespace

TEST_CASE("a transformer layer stays within the launch budget on the device path", "[launches]") {
  kernels::AttentionPathScope device_path(kernels::AttentionPath::batched);
  // Two shapes that differ in S (one and two 128-row tiles), micro-batch and heads; N > 64 rows
  // in both (the column sums' two-stage regime of every realistic shape).
  const LayerCounts a = count_layer(budget_shape(4, 48), 2, model::Recompute::selective);
  const LayerCounts b = count_layer(budget_shape(8, 160), 3, model::Recompute::selective);
  INFO("forward " << a.forward.kernels << " kernels + " << a.forward.blas << " BLAS, backward "
                  << a.backward.kernels << " kernels + " << a.backward.blas << " BLAS");
  CHECK(a.forward.compute() + a.backward.compute() <= kBudget);
  CHECK(a.forward.kernels == b.forward.kernels);
  CHECK(a.forward.blas == b.forward.blas);
  CHECK(a.backward.kernels == b.backward.kernels);
  CHECK(a.backward.blas == b.backward.blas);
  CHECK(a.forward.collectives == 0);  // one rank: no collective is started
  CHECK(a.backward.collectives == 0);
  // The other recompute modes keep constant counts too.
  for (model::Recompute r : {model::Recompute::none, model::Recompute::full}) {
    const LayerCounts ra = count_layer(budget_shape(4, 48), 2, r), rb = count_layer(budget_shape(8, 160), 3, r);
    INFO("recompute " << model::recompute_name(r));
    CHECK(ra.forward.compute() == rb.forward.compute());
    CHECK(ra.backward.compute() == rb.backward.compute());
  }
}

TEST_CASE("a transformer layer on flash attention stays within the launch budget", "[launches]") {
  // One kernel for the attention forward and one for its backward, whatever S, batch and heads.
  const LayerCounts a = count_layer(budget_shape(4, 48, true), 2, model::Recompute::selective);
  const LayerCounts b = count_layer(budget_shape(8, 160, true), 3, model::Recompute::selective);
  const LayerCounts batched = count_layer(budget_shape(4, 48), 2, model::Recompute::selective);
  INFO("flash: forward " << a.forward.kernels << " kernels + " << a.forward.blas << " BLAS, backward "
                         << a.backward.kernels << " kernels + " << a.backward.blas << " BLAS");
  CHECK(a.forward.compute() + a.backward.compute() <= kBudget);
  CHECK(a.forward.compute() == b.forward.compute());
  CHECK(a.backward.compute() == b.backward.compute());
  CHECK(a.forward.compute() + a.backward.compute() <= batched.forward.compute() + batched.backward.compute());
}

TEST_CASE("the causal-tile path's launches grow with S, batch and heads (what the budget rules out)", "[launches]") {
  kernels::AttentionPathScope host_path(kernels::AttentionPath::causal_tiles);
  const LayerCounts a = count_layer(budget_shape(4, 48), 2, model::Recompute::selective);
  const LayerCounts b = count_layer(budget_shape(8, 160), 3, model::Recompute::selective);
  CHECK(b.forward.blas > a.forward.blas);
  CHECK(b.backward.blas > a.backward.blas);
  CHECK(a.forward.kernels == b.forward.kernels);  // the tiles add GEMMs, never kernels
}

TEST_CASE("launch counting chains a Kokkos Tools callback that was there before it", "[launches]") {
  namespace kt = Kokkos::Tools::Experimental;
  static int seen = 0;
  seen = 0;
  const kx::ExecSpace exec;
  kernels::Vector<Real> v("v", 16);  // (its initialisation is a kernel: before the tool is in place)
  exec.fence();
  const kt::EventSet before = kt::get_callbacks();
  kt::set_begin_parallel_for_callback([](const char*, const std::uint32_t, std::uint64_t*) { ++seen; });
  {
    kernels::LaunchCounting counting;
    Kokkos::parallel_for("tptrain::test::chained", Kokkos::RangePolicy<kx::ExecSpace>(exec, 0, 16),
                         KOKKOS_LAMBDA(const int i) { v(i) = Real(i); });
    exec.fence();
    CHECK(lc::total().kernels == 1);
  }
  CHECK(seen == 1);  // the earlier tool saw the kernel too
  Kokkos::parallel_for("tptrain::test::after", Kokkos::RangePolicy<kx::ExecSpace>(exec, 0, 16),
                       KOKKOS_LAMBDA(const int i) { v(i) = Real(2 * i); });
  exec.fence();
  CHECK(seen == 2);  // its callback is back in place after counting ends
  CHECK(lc::total().kernels == 1);  // and nothing is counted any more
  kt::set_callbacks(before);
}
