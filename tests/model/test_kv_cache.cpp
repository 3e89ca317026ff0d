// Generation with a key/value cache (src/model/kv_cache.hpp, gpt_inference.hpp) against the
// training forward: the cached attention kernel against attention_forward for the same rows,
// and the incremental forward of a whole model (prefill, then one row per token) against the
// logits of GptModel::forward_logits at the same positions, on 1, 2 and 4 tensor ranks, with
// and without sequence parallelism.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "catch.hpp"
#include "kokkos_kernels/attention.hpp"
#include "kokkos_kernels/flash_attention.hpp"
#include "kokkos_kernels/kv_cache_append.hpp"
#include "tests/kokkos_kernels/repeat_kv_reference.hpp"
#include "kokkos_kernels/rope.hpp"
#include "src/model/gpt_inference.hpp"
#include "tests/model/model_test_util.hpp"

using namespace tptrain;

namespace {

template <class V>
std::vector<double> host_values(const V& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<double> out;
  for (std::size_t i = 0; i < h.extent(0); ++i)
    if constexpr (V::rank == 1) out.push_back(static_cast<double>(h(i)));
    else
      for (std::size_t j = 0; j < h.extent(1); ++j) out.push_back(static_cast<double>(h(i, j)));
  return out;
}

double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

}  // namespace

TEST_CASE("cached flash attention equals the batched training attention for the same rows", "[model][kv_cache]") {
  const kx::ExecSpace exec;
  const std::int64_t S = 37, nh = 3, d = 8, hl = nh * d;
  kernels::Matrix<float> qkv("qkv", S, 3 * hl), out("out", S, hl);
  {
    auto h = Kokkos::create_mirror_view(qkv);
    std::mt19937 gen(7);
    std::normal_distribution<float> normal(0.0f, 1.5f);
    for (std::int64_t i = 0; i < S; ++i)
      for (std::int64_t j = 0; j < 3 * hl; ++j) h(i, j) = normal(gen);
    Kokkos::deep_copy(qkv, h);
  }
  kernels::Vector<float> lse("lse", S * nh);
  kernels::attention_forward(exec, qkv, out, lse, 1, S, nh, d);
  const std::vector<double> want = host_values(out);

  // Blocks of new rows as generation makes them: a prefill of 13, single rows, a block of 5, ...
  Kokkos::View<float***, Kokkos::LayoutRight, kx::MemSpace> k("k", nh, S, d), v("v", nh, S, d);
  kernels::Vector<float> scores("lse_workspace", S * nh);
  kernels::Matrix<float> got("got", S, hl);
  std::int64_t p = 0;
  for (std::int64_t n : {13, 1, 1, 5, 1, 16}) {
    INFO("rows [" << p << ", " << p + n << ")");
    const auto rows = std::make_pair(p, p + n);
    const auto q = Kokkos::subview(qkv, rows, Kokkos::ALL());
    kernels::kv_cache_append(exec, q, k, v, p);
    kernels::flash_attention_cached_forward(exec, q, k, v, p, Kokkos::subview(got, rows, Kokkos::ALL()), scores,
                                            kernels::Tokens());
    p += n;
  }
  REQUIRE(p == S);
  CHECK(max_abs_difference(host_values(got), want) <= 1e-5);

  // Positions beyond the cache are refused before anything runs.
  CHECK_THROWS_WITH(kernels::kv_cache_append(exec, Kokkos::subview(qkv, std::make_pair(0, 2), Kokkos::ALL()), k, v, S - 1),
                    Catch::Contains("inside the cache"));
}

namespace {

// The largest difference between the incremental forward's last-row logits and the full
// forward's logits of that row, over every position of the sequence, fed in blocks `blocks`.
// The preset's block (src/model/spec/block_spec.hpp); rotary ones with grouped-query attention (2 key/value
// heads for 4 query heads, 4 on 4 tensor ranks); DeepSeek-V3's with multi-head latent attention
// and its latent cache. The full forward may split sequences; the
// generation model never does (generate builds it without), and holds the same weights.
double incremental_vs_full(const char* preset, int tp_size, bool sequence_parallel,
                           const std::vector<std::int64_t>& blocks) {
  auto tp = test::tp_group(tp_size);
  const kx::ExecSpace exec;
  model::GptShape shape = test::tiny_shape(tp_size);
  static_cast<model::BlockSpec&>(shape) = model::block_preset(preset)->spec;
  if (shape.latent_attention()) {  // DeepSeek-V3's block at the tiny shape: heads of 3 + 4 and 2 features
    shape.q_lora_rank = 6;
    shape.kv_lora_rank = 5;
    shape.qk_nope_head_dim = 3;
    shape.qk_rope_head_dim = 4;
    shape.v_head_dim = 2;
  } else if (shape.position == "rope") {
    shape.kv_heads = std::max(2, tp_size);
  }
  shape.seq_length = 12;
  shape.sequence_parallel = sequence_parallel;
  model::GptModel<float> m(shape, 1, *tp, 3);
  test::randomise(m, 0.4f, 17);
  const auto batch = test::random_batch(1, shape.seq_length, shape.vocab_size, 23);
  m.forward_logits(exec, batch.first);
  const std::vector<double> full = host_values(m.local_logits());  // [S, V_padded/tp]
  const std::size_t V = static_cast<std::size_t>(shape.local_vocab());

  model::GptShape whole = shape;
  whole.sequence_parallel = false;
  model::GptModel<float> g(whole, 1, *tp, 3);
  test::randomise(g, 0.4f, 17);
  model::GptInference<float> inference(g);
  // K and V of kv_heads heads per token and layer on this rank: 2 · layers · S · kv/t · d · 4 bytes;
  // multi-head latent attention's latent, the same on every rank: layers · S · (r_kv + d_R) · 4.
  if (shape.latent_attention())
    CHECK(inference.cache_bytes() == 4LL * shape.layers * shape.seq_length * (shape.kv_lora_rank + shape.qk_rope_head_dim));
  else
    CHECK(inference.cache_bytes() == 2LL * shape.layers * shape.seq_length * shape.local_kv_heads() * shape.head_dim() * 4);
  double worst = 0;
  for (int pass = 0; pass < 2; ++pass) {  // again after reset(): the cache is overwritten, not appended to
    inference.reset();
    std::int64_t p = 0;
    for (std::int64_t n : blocks) {
      inference.forward(exec, Kokkos::subview(batch.first, std::make_pair(p, p + n)));
      p += n;
      REQUIRE(inference.position() == p);
      const std::vector<double> got = host_values(inference.last_logits());
      const std::vector<double> want(full.begin() + static_cast<std::ptrdiff_t>((p - 1) * V),
                                     full.begin() + static_cast<std::ptrdiff_t>(p * V));
      worst = std::max(worst, max_abs_difference(got, want));
    }
    REQUIRE(p == shape.seq_length);
  }
  CHECK_THROWS_WITH(inference.forward(exec, Kokkos::subview(batch.first, std::make_pair(0, 1))),
                    Catch::Contains("do not fit in a cache of 12 positions"));
  return worst;
}

}  // namespace

TEST_CASE("the incremental forward with a KV cache gives the full forward's logits", "[model][kv_cache][mpi]") {
  std::size_t count = 0;
  const model::BlockPreset* presets = model::block_presets(count);
  for (std::size_t i = 0; i < count; ++i)
    for (int tp : {1, 2, 4}) {
      if (test::world_size() % tp != 0) continue;
      for (bool sp : {false, true}) {
        if (sp && tp == 1) continue;
        const char* preset = presets[i].name;
        INFO(preset << ", tensor " << tp << (sp ? ", sequence parallel" : ""));
        CHECK(incremental_vs_full(preset, tp, sp, {5, 1, 1, 1, 3, 1}) <= 1e-5);
        CHECK(incremental_vs_full(preset, tp, sp, {12}) <= 1e-5);
        CHECK(incremental_vs_full(preset, tp, sp, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}) <= 1e-5);
      }
    }
}

TEST_CASE("the incremental forward refuses a model that splits sequences", "[model][kv_cache][mpi]") {
  if (test::world_size() < 2) return;
  auto tp = test::tp_group(2);
  model::GptShape shape = test::tiny_shape(2);
  shape.seq_length = 12;
  shape.sequence_parallel = true;
  model::GptModel<float> m(shape, 1, *tp, 3);
  CHECK_THROWS_WITH(model::GptInference<float>(m), Catch::Contains("without sequence parallelism"));
}

// Grouped-query attention: a cache of nkv key/value heads read by nh query heads (head h by
// key/value head h / (nh/nkv)) equals the training attention on Q, K and V expanded by repeat_kv;
// and the rotary embedding of rows at an offset equals the training one at their positions.
TEST_CASE("cached flash attention of a grouped cache equals the expanded batched attention", "[model][kv_cache]") {
  const kx::ExecSpace exec;
  const std::int64_t S = 29, nh = 6, nkv = 2, d = 4, width = (nh + 2 * nkv) * d;
  kernels::Matrix<float> grouped("grouped", S, width), expanded("expanded", S, 3 * nh * d), out("out", S, nh * d);
  {
    auto h = Kokkos::create_mirror_view(grouped);
    std::mt19937 gen(11);
    std::normal_distribution<float> normal(0.0f, 1.5f);
    for (std::int64_t i = 0; i < S; ++i)
      for (std::int64_t j = 0; j < width; ++j) h(i, j) = normal(gen);
    Kokkos::deep_copy(grouped, h);
  }
  // Rotary positions: the whole sequence at once, and in blocks at their offsets.
  kernels::Matrix<float> cos("cos", S, d / 2), sin("sin", S, d / 2), blocks("blocks", S, width);
  std::vector<double> omega;
  for (std::int64_t i = 0; i < d / 2; ++i) omega.push_back(std::pow(10000.0, -2.0 * double(i) / double(d)));
  kernels::rope_tables(exec, cos, sin, omega);
  Kokkos::deep_copy(blocks, grouped);
  kernels::rope_forward(exec, grouped, cos, sin, nh + nkv);
  std::int64_t p = 0;
  for (std::int64_t n : {7, 1, 1, 20}) {
    kernels::rope_forward_at(exec, Kokkos::subview(blocks, std::make_pair(p, p + n), Kokkos::ALL()), cos, sin, nh + nkv, p);
    p += n;
  }
  CHECK(max_abs_difference(host_values(blocks), host_values(grouped)) <= 1e-6);
  CHECK_THROWS_WITH(kernels::rope_forward_at(exec, Kokkos::subview(blocks, std::make_pair(0, 2), Kokkos::ALL()), cos,
                                             sin, nh + nkv, S - 1),
                    Catch::Contains("within the tables"));

  kernels::repeat_kv_forward(exec, grouped, expanded, nh, nkv, d);
  kernels::Vector<float> lse("lse", S * nh);
  kernels::attention_forward(exec, expanded, out, lse, 1, S, nh, d);
  const std::vector<double> want = host_values(out);
  Kokkos::View<float***, Kokkos::LayoutRight, kx::MemSpace> k("k", nkv, S, d), v("v", nkv, S, d);
  kernels::Vector<float> scores("lse_workspace", S * nh);
  kernels::Matrix<float> got("got", S, nh * d);
  p = 0;
  for (std::int64_t n : {13, 1, 1, 5, 1, 8}) {
    const auto rows = std::make_pair(p, p + n);
    const auto q = Kokkos::subview(grouped, rows, Kokkos::ALL());
    kernels::kv_cache_append(exec, q, k, v, p);
    kernels::flash_attention_cached_forward(exec, q, k, v, p, Kokkos::subview(got, rows, Kokkos::ALL()), scores,
                                            kernels::Tokens());
    p += n;
  }
  REQUIRE(p == S);
  CHECK(max_abs_difference(host_values(got), want) <= 1e-5);
  // A cache whose heads do not divide the query heads is refused.
  Kokkos::View<float***, Kokkos::LayoutRight, kx::MemSpace> k4("k4", 4, S, d);
  CHECK_THROWS_WITH(kernels::kv_cache_append(exec, grouped, k4, k4, 0), Catch::Contains("nkv dividing nh"));
}
