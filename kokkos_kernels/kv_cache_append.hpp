// The key/value cache's writes (generation, src/model/kv_cache.hpp): K and V of n new rows of the
// QKV output [n, (nh + 2·nkv)·d] (columns [Q: nh heads | K: nkv | V: nkv], local head h at h*d
// inside each block) stored at positions [p, p + n) of the caches k_cache, v_cache [nkv, P, d]:
// nkv·d per token, not nh·d. The attention of the new rows over the cache is flash attention's
// cached forward (flash_attention.hpp, flash_attention_cached_forward).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

namespace detail {
// The query heads nh of qkv [n, (nh + 2·nkv)·d] for caches of nkv heads of d features; 0 when the
// columns do not fit that layout or nkv does not divide nh.
inline std::int64_t cached_query_heads(std::size_t qkv_columns, std::int64_t nkv, std::int64_t d) {
  if (nkv < 1 || d < 1 || qkv_columns % static_cast<std::size_t>(d) != 0) return 0;
  const std::int64_t nh = static_cast<std::int64_t>(qkv_columns) / d - 2 * nkv;
  return nh >= nkv && nh % nkv == 0 ? nh : 0;
}
}  // namespace detail

// K and V of the n rows of qkv into positions [p, p + n) of the caches.
template <class Exec, class QKV, class CV>
void kv_cache_append(const Exec& exec, const QKV& qkv /*[n, (nh + 2 nkv) d]*/, const CV& k_cache /*[nkv, P, d]*/,
                     const CV& v_cache /*[nkv, P, d]*/, const std::int64_t p) {
  detail::check_view<Exec, QKV, 2>();
  detail::check_view<Exec, CV, 3>();
  detail::check_writable<CV>();
  const std::int64_t n = qkv.extent(0), nkv = k_cache.extent(0), P = k_cache.extent(1), d = k_cache.extent(2);
  const std::int64_t nh = detail::cached_query_heads(qkv.extent(1), nkv, d);
  detail::require(nh > 0 && v_cache.extent(0) == k_cache.extent(0) && v_cache.extent(1) == k_cache.extent(1) &&
                      v_cache.extent(2) == k_cache.extent(2),
                  "kv_cache_append",
                  "shapes must be qkv[n, (nh + 2*nkv)*d] with nkv dividing nh, k_cache and v_cache [nkv, P, d]");
  detail::require(p >= 0 && p + n <= P, "kv_cache_append", "positions [p, p + n) must lie inside the cache");
  if (n == 0) return;
  const std::int64_t k0 = nh * d, v0 = (nh + nkv) * d, kvl = nkv * d;
  Kokkos::parallel_for(
      "tptrain::kernels::kv_cache_append", detail::range2d(exec, n, kvl),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t c) {
        const std::int64_t g = c / d, e = c % d;
        k_cache(g, p + i, e) = qkv(i, k0 + c);
        v_cache(g, p + i, e) = qkv(i, v0 + c);
      });
}

}  // namespace tptrain::kernels
