// Inference attention with a key/value cache (generation, docs/design.md "Generation"): the
// forward of ParallelAttention for n new rows of one sequence at positions [p, p + n), whose
// keys and values for positions [0, p) are kept from earlier calls. Forward only.
//
// Tensor parallelism is the training attention's: QKV column-parallel with whole heads per rank,
// so rank r's cache holds K and V of its local heads only ([local heads, max positions, head dim],
// sharded by heads exactly like the QKV weight's rows); the output projection is row-parallel and
// its all-reduce g is the one collective. Sequence parallelism is not used here: every tensor rank
// holds the n rows whole (n is 1 per generated token, nothing to split), which gives the same sums.
// The layers are copies of the training layer's ColumnParallelLinear / RowParallelLinear (their
// parameters are views: no weight is copied) without its sequence-parallel buffers.
#pragma once

#include <cstdint>
#include <utility>

#include "kokkos_kernels/cached_attention.hpp"
#include "src/model/linear.hpp"
#include "src/model/parallel_attention.hpp"
#include "src/util/memory_category.hpp"

namespace tptrain::model {

// K and V of one layer's local heads, positions [0, max positions).
template <class T>
struct KvCache {
  Kokkos::View<T***, Kokkos::LayoutRight, kx::MemSpace> k, v;  // [local heads, positions, head dim]

  KvCache() = default;
  KvCache(const std::string& name, std::int64_t local_heads, std::int64_t positions, std::int64_t head_dim) {
    util::MemoryCategoryScope as(util::MemoryCategory::activations);
    k = decltype(k)(name + ".k_cache", local_heads, positions, head_dim);
    v = decltype(v)(name + ".v_cache", local_heads, positions, head_dim);
  }
  std::int64_t positions() const { return static_cast<std::int64_t>(k.extent(1)); }
};

// What a CachedAttention computes in and does not keep: one set shared by every block of a stage
// (the scores are the largest buffer, [local heads, rows, positions]).
template <class T>
struct CachedAttentionScratch {
  kernels::Matrix<T> qkv_out;  // [rows, 3*H/tp]
  kernels::Matrix<T> ctx;      // [rows, H/tp]
  Kokkos::View<T***, Kokkos::LayoutRight, kx::MemSpace> scores;  // [local heads, rows, positions]

  CachedAttentionScratch() = default;
  // For blocks of at most `rows` new rows, `positions` cached positions (model.seq_length).
  CachedAttentionScratch(const GptShape& s, std::int64_t rows, std::int64_t positions) {
    util::MemoryCategoryScope as(util::MemoryCategory::workspace);
    qkv_out = kernels::Matrix<T>("inference.attention.qkv", rows, 3 * std::int64_t(s.local_hidden()));
    ctx = kernels::Matrix<T>("inference.attention.ctx", rows, s.local_hidden());
    scores = decltype(scores)("inference.attention.scores", s.local_heads(), rows, positions);
  }
};

template <class T>
struct CachedAttention {
  ColumnParallelLinear<T> qkv;  // H -> 3H/tp, the training layer's parameters
  RowParallelLinear<T> proj;    // H/tp -> H
  KvCache<T> cache;
  CachedAttentionScratch<T> scratch;

  // A cache of `positions` positions (model.seq_length); `scratch` shared with the stage's other blocks.
  CachedAttention(const ParallelAttention<T>& trained, const std::string& name, std::int64_t positions,
                  const CachedAttentionScratch<T>& shared)
      : qkv(without_sequence_parallel(trained.qkv)),
        proj(without_sequence_parallel(trained.proj)),
        cache(name, trained.nh_local, positions, trained.d),
        scratch(shared) {}

  // y [n, H] = attention(x [n, H]) for the rows at positions [p, p + n); stores their K and V.
  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x, const YV& y, std::int64_t p) {
    const auto n = std::make_pair(std::int64_t(0), static_cast<std::int64_t>(x.extent(0)));
    const auto q = Kokkos::subview(scratch.qkv_out, n, Kokkos::ALL());
    const auto c = Kokkos::subview(scratch.ctx, n, Kokkos::ALL());
    qkv.forward(exec, tp, x, q);
    {
      PhaseScope phase(Phase::attention);
      kernels::kv_cache_append(exec, q, cache.k, cache.v, p);
      kernels::cached_attention_forward(exec, q, cache.k, cache.v, p, scratch.scores, c);
    }
    proj.forward(exec, tp, c, y);
  }

 private:
  template <class Layer>
  static Layer without_sequence_parallel(Layer layer) {
    layer.sp = {};
    layer.column_scratch = {};
    return layer;
  }
};

}  // namespace tptrain::model
