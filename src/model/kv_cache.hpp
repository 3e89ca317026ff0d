// The key/value cache of generation (docs/design.md, "Generation"): K and V of one layer's local
// key/value heads for the positions of one sequence seen so far, so that each new token runs the
// training layers' forward on its own row (TransformerLayer::forward with a CacheStep) instead of
// the whole window again.
//
// Tensor parallelism is the training attention's: QKV column-parallel with whole heads per rank,
// so rank r's cache holds K and V of its nkv/t key/value heads only ([nkv/t, positions, head dim],
// sharded by heads as the QKV weight's K and V rows): kv_heads × head dim per token and layer,
// not heads × head dim (grouped-query attention reads it without a copy). Sequence parallelism is
// not used while generating: every tensor rank holds the n new rows whole (n is 1 per generated
// token, nothing to split), which gives the same sums.
#pragma once

#include <cstdint>
#include <string>

#include "kokkos_kernels/views.hpp"
#include "src/util/memory_category.hpp"

namespace tptrain::model {

template <class T>
struct KvCache {
  Kokkos::View<T***, Kokkos::LayoutRight, kx::MemSpace> k, v;  // [local key/value heads, positions, head dim]

  KvCache() = default;
  KvCache(const std::string& name, std::int64_t local_kv_heads, std::int64_t positions, std::int64_t head_dim) {
    util::MemoryCategoryScope as(util::MemoryCategory::activations);
    k = decltype(k)(name + ".k_cache", local_kv_heads, positions, head_dim);
    v = decltype(v)(name + ".v_cache", local_kv_heads, positions, head_dim);
  }
  std::int64_t positions() const { return static_cast<std::int64_t>(k.extent(1)); }
  std::int64_t bytes() const { return static_cast<std::int64_t>(2 * k.size() * sizeof(T)); }
};

// One call of the incremental forward: the new rows are at positions [position, position + n)
// of the cached sequence.
template <class T>
struct CacheStep {
  KvCache<T>* cache;
  std::int64_t position;
  kernels::Tokens doc_start;  // [n]: the first position of each new row's document (empty: none)
  kernels::Tokens positions;  // [n]: each new row's position in its document (empty: its place p + i)
};

}  // namespace tptrain::model
