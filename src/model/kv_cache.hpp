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

//
// Multi-head latent attention (src/model/multi_head_latent_attention.hpp) caches its latent instead,
// c_KV and the rotated shared key k_R, [positions, r_kv + d_R] per layer (DeepSeek-V2 §2.1.2:
// 576 values per token and layer for DeepSeek-V3, where its heads' keys and values would be
// 128 × (192 + 128)); each step decompresses the cached positions into k and v, scratch the
// stage's layers share, and the cost of that is the kv_up GEMM over the cached positions.
template <class T>
struct KvCache {
  // [local key/value heads, positions, head dim] (V: its value head dim): the cache, or with a
  // latent the stage's shared decompressed keys and values.
  Kokkos::View<T***, Kokkos::LayoutRight, kx::MemSpace> k, v;
  kernels::Matrix<T> latent;    // [positions, r_kv + d_R]: multi-head latent attention's cache (else empty)
  kernels::Matrix<T> expanded;  // [positions, nh/t·(d_nope + d_v)]: its up-projection (shared scratch)

  KvCache() = default;
  KvCache(const std::string& name, std::int64_t local_kv_heads, std::int64_t positions, std::int64_t head_dim) {
    util::MemoryCategoryScope as(util::MemoryCategory::activations);
    k = decltype(k)(name + ".k_cache", local_kv_heads, positions, head_dim);
    v = decltype(v)(name + ".v_cache", local_kv_heads, positions, head_dim);
  }
  static KvCache latent_cache(const std::string& name, std::int64_t positions, std::int64_t width) {
    util::MemoryCategoryScope as(util::MemoryCategory::activations);
    KvCache c;
    c.latent = kernels::Matrix<T>(name + ".latent_cache", positions, width);
    return c;
  }
  std::int64_t positions() const {
    return static_cast<std::int64_t>(latent.size() > 0 ? latent.extent(0) : k.extent(1));
  }
  // What is cached per layer: the latent, or K and V.
  std::int64_t bytes() const {
    return static_cast<std::int64_t>((latent.size() > 0 ? latent.size() : k.size() + v.size()) * sizeof(T));
  }
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
