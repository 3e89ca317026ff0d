// The key/value cache's writes (generation, src/model/kv_cache.hpp): K and V of n new rows of the
// QKV output [n, nh·d + nkv·d + nkv·dv] (columns [Q: nh heads of d | K: nkv of d | V: nkv of dv],
// local head h at h·d, or h·dv in the V block) stored at positions [p, p + n) of the caches
// k_cache [nkv, P, d] and v_cache [nkv, P, dv] (dv = d but in multi-head latent attention):
// nkv·(d + dv) per token, not nh·(d + dv). The attention of the new rows over the cache is flash
// attention's cached forward (flash_attention.hpp, flash_attention_cached_forward).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

namespace detail {
// The query heads nh of qkv [n, nh·d + nkv·d + nkv·dv] for caches of nkv heads of d (keys) and dv
// (values, 0: d) features; 0 when the columns do not fit that layout or nkv does not divide nh.
inline std::int64_t cached_query_heads(std::size_t qkv_columns, std::int64_t nkv, std::int64_t d,
                                       std::int64_t dv = 0) {
  if (dv == 0) dv = d;
  if (nkv < 1 || d < 1 || dv < 1) return 0;
  const std::int64_t q_columns = static_cast<std::int64_t>(qkv_columns) - nkv * (d + dv);
  if (q_columns <= 0 || q_columns % d != 0) return 0;
  const std::int64_t nh = q_columns / d;
  return nh >= nkv && nh % nkv == 0 ? nh : 0;
}
}  // namespace detail

// K and V of the n rows of qkv into positions [p, p + n) of the caches.
template <class Exec, class QKV, class CV>
void kv_cache_append(const Exec& exec, const QKV& qkv /*[n, (nh + nkv) d + nkv dv]*/,
                     const CV& k_cache /*[nkv, P, d]*/, const CV& v_cache /*[nkv, P, dv]*/, const std::int64_t p) {
  detail::check_view<Exec, QKV, 2>();
  detail::check_view<Exec, CV, 3>();
  detail::check_writable<CV>();
  const std::int64_t n = qkv.extent(0), nkv = k_cache.extent(0), P = k_cache.extent(1), d = k_cache.extent(2),
                     dv = v_cache.extent(2);
  const std::int64_t nh = detail::cached_query_heads(qkv.extent(1), nkv, d, dv);
  detail::require(nh > 0 && v_cache.extent(0) == k_cache.extent(0) && v_cache.extent(1) == k_cache.extent(1),
                  "kv_cache_append",
                  "shapes must be qkv[n, (nh + nkv)*d + nkv*dv] with nkv dividing nh, k_cache [nkv, P, d] and "
                  "v_cache [nkv, P, dv]");
  detail::require(p >= 0 && p + n <= P, "kv_cache_append", "positions [p, p + n) must lie inside the cache");
  if (n == 0) return;
  const std::int64_t k0 = nh * d, v0 = (nh + nkv) * d;
  if (dv == d) {  // K and V of a row in one pass (the common layout)
    Kokkos::parallel_for(
        "tptrain::kernels::kv_cache_append", detail::range2d(exec, n, nkv * d),
        KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t c) {
          const std::int64_t g = c / d, e = c % d;
          k_cache(g, p + i, e) = qkv(i, k0 + c);
          v_cache(g, p + i, e) = qkv(i, v0 + c);
        });
    return;
  }
  // One launch still: the first nkv·d columns of a row index K, the next nkv·dv V.
  Kokkos::parallel_for(
      "tptrain::kernels::kv_cache_append", detail::range2d(exec, n, nkv * (d + dv)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t c) {
        if (c < nkv * d) {
          k_cache(c / d, p + i, c % d) = qkv(i, k0 + c);
        } else {
          const std::int64_t cv = c - nkv * d;
          v_cache(cv / dv, p + i, cv % dv) = qkv(i, v0 + cv);
        }
      });
}

}  // namespace tptrain::kernels
