// A transformer layer on the three attention paths (kokkos_kernels/attention_path.hpp): the batched
// device path, run here on the host, gives the causal-tile path's output, input gradient and
// parameter gradients, in every recompute mode, with the model's own buffers (the context
// gradient in d_qkv's Q block, the pointer tables in the row-tile buffer).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kokkos_kernels/attention_path.hpp"
#include "tests/model/model_test_util.hpp"

namespace {

using namespace tptrain;
using Real = float;
using Mat = kernels::Matrix<Real>;

struct LayerResult {
  std::vector<double> y, dx, grads;
};

std::vector<double> host_copy(const Mat& m) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m);
  std::vector<double> v;
  for (std::size_t i = 0; i < h.extent(0); ++i)
    for (std::size_t j = 0; j < h.extent(1); ++j) v.push_back(h(i, j));
  return v;
}

Mat random_matrix(const char* label, std::int64_t rows, std::int64_t cols, unsigned seed) {
  Mat m(std::string(label), rows, cols);
  auto h = Kokkos::create_mirror_view(m);
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) h(i, j) = static_cast<Real>(n(rng));
  Kokkos::deep_copy(m, h);
  return m;
}

LayerResult run_layer(kernels::AttentionPath path, model::Recompute recompute, int kv_heads = 0) {
  const kernels::AttentionPathScope scope(path);
  model::GptShape s;
  s.flash_attention = path == kernels::AttentionPath::flash;
  s.kv_heads = kv_heads;
  s.layers = 1;
  s.hidden = 64;
  s.heads = 4;
  s.ffn_hidden = 256;
  s.seq_length = 48;
  s.vocab_size = 64;
  s.tensor = 1;
  const int batch = 2;
  auto tp = test::tp_group(1);
  const kx::ExecSpace exec;
  model::Workspace<Real> ws;
  model::TransformerLayer<Real> layer("layers/0", s, batch, *tp, ws, recompute);
  for (auto* p : layer.parameters()) {
    p->init_std = 0.2f;  // larger than GPT-2's 0.02: the attention scores then matter
    model::allocate_and_initialise(*p, 11);
  }
  const std::int64_t rows = std::int64_t(batch) * s.seq_length;
  const Mat x = random_matrix("x", rows, s.hidden, 1), dy = random_matrix("dy", rows, s.hidden, 2);
  Mat y("y", rows, s.hidden), dx("dx", rows, s.hidden);
  layer.forward(exec, *tp, x, y);
  if (recompute == model::Recompute::full) layer.forward(exec, *tp, x, y);  // the backward's re-run
  layer.backward(exec, *tp, dy, x, dx);
  exec.fence();
  LayerResult r{host_copy(y), host_copy(dx), {}};
  for (auto* p : layer.parameters()) {
    auto g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p->grad);
    for (std::size_t i = 0; i < g.extent(0); ++i) r.grads.push_back(g(i));
  }
  return r;
}

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return err / scale;
}

}  // namespace

TEST_CASE("a transformer layer gives the same results on every attention path", "[model][attention_paths]") {
  // Flash attention against the batched core in both GEMM forms; with grouped-query attention
  // (2 key/value heads for 4 query heads) every core reads K and V in place.
  for (const int kv_heads : {0, 2})
    for (model::Recompute r : {model::Recompute::selective, model::Recompute::none, model::Recompute::full}) {
      INFO("recompute " << model::recompute_name(r) << ", kv_heads " << kv_heads);
      const LayerResult tiled = run_layer(kernels::AttentionPath::causal_tiles, r, kv_heads);
      const LayerResult batched = run_layer(kernels::AttentionPath::batched, r, kv_heads);
      const LayerResult flash = run_layer(kernels::AttentionPath::flash, r, kv_heads);
      REQUIRE(tiled.y.size() == batched.y.size());
      REQUIRE(tiled.grads.size() == batched.grads.size());
      REQUIRE(flash.grads.size() == batched.grads.size());
      CHECK(max_rel(batched.y, tiled.y) < 1e-5);
      CHECK(max_rel(batched.dx, tiled.dx) < 1e-4);
      CHECK(max_rel(batched.grads, tiled.grads) < 1e-4);
      CHECK(max_rel(flash.y, tiled.y) < 1e-5);
      CHECK(max_rel(flash.dx, tiled.dx) < 1e-4);
      CHECK(max_rel(flash.grads, tiled.grads) < 1e-4);
    }
}
