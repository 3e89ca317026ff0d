// Causal attention of n new query rows against a key/value cache (generation with a KV cache,
// src/model/kv_cache.hpp): the forward of attention.hpp for the rows at positions [p, p + n) of
// one sequence, whose keys and values for positions [0, p) were stored by earlier calls.
//
// qkv [n, 3*Hl] as in attention.hpp (columns [Q | K | V], local head h at h*d inside each block);
// the caches k_cache, v_cache [nh_local, P, d] hold position j of head h at (h, j, :), P >= p + n
// the most positions they can hold. Per local head h, with scale = 1/sqrt(d):
//   K_h[p:p+n), V_h[p:p+n) = the new rows' K and V      (kv_cache_append)
//   S = Q_h K_h[0:p+n)ᵀ                                 (one strided-batched GEMM over the heads)
//   P_ij = exp(scale S_ij - max) / Σ for j <= p + i, 0 otherwise
//   O_h = P V_h[0:p+n)                                  (one strided-batched GEMM over the heads)
// The softmax has the arithmetic of causal_softmax_forward (max of the raw scores, then
// exp(scale s - scale max), normalised by one reciprocal), so a row's output equals the full
// forward's for the same row up to the GEMMs' summation order.
//
// Precision: qkv, the caches, scores and out share one storage type T; max, exp and sums are
// acc_t<T>. Views: the last index has stride 1 (row-range subviews work); scores is a
// [nh_local, >= n, >= p + n] workspace.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kokkos_kernels/batched_gemm.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

// K and V of the n rows of qkv into positions [p, p + n) of the caches.
template <class Exec, class QKV, class CV>
void kv_cache_append(const Exec& exec, const QKV& qkv /*[n, 3*Hl]*/, const CV& k_cache /*[nh, P, d]*/,
                     const CV& v_cache /*[nh, P, d]*/, const std::int64_t p) {
  detail::check_view<Exec, QKV, 2>();
  detail::check_view<Exec, CV, 3>();
  detail::check_writable<CV>();
  const std::int64_t n = qkv.extent(0), nh = k_cache.extent(0), P = k_cache.extent(1), d = k_cache.extent(2);
  detail::require(qkv.extent(1) == static_cast<std::size_t>(3 * nh * d) && v_cache.extent(0) == k_cache.extent(0) &&
                      v_cache.extent(1) == k_cache.extent(1) && v_cache.extent(2) == k_cache.extent(2),
                  "kv_cache_append", "shapes must be qkv[n, 3*nh*d], k_cache and v_cache [nh, P, d]");
  detail::require(p >= 0 && p + n <= P, "kv_cache_append", "positions [p, p + n) must lie inside the cache");
  if (n == 0) return;
  const std::int64_t hl = nh * d;
  Kokkos::parallel_for(
      "tptrain::kernels::kv_cache_append", detail::range2d(exec, n, hl),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t c) {
        const std::int64_t h = c / d, e = c % d;
        k_cache(h, p + i, e) = qkv(i, hl + c);
        v_cache(h, p + i, e) = qkv(i, 2 * hl + c);
      });
}

// out [n, Hl] = attention of the n query rows of qkv at positions [p, p + n) over the cached keys
// and values [0, p + n) (kv_cache_append must have stored the new rows' first).
template <class Exec, class QKV, class CV, class SV, class OV>
void cached_attention_forward(const Exec& exec, const QKV& qkv /*[n, 3*Hl]*/, const CV& k_cache /*[nh, P, d]*/,
                              const CV& v_cache /*[nh, P, d]*/, const std::int64_t p,
                              const SV& scores /*[nh, >= n, >= p + n] workspace*/, const OV& out /*[n, Hl]*/) {
  detail::check_view<Exec, QKV, 2>();
  detail::check_view<Exec, CV, 3>();
  detail::check_view<Exec, SV, 3>();
  detail::check_view<Exec, OV, 2>();
  detail::check_writable<SV>();
  detail::check_writable<OV>();
  using T = typename OV::non_const_value_type;
  using A = kx::acc_t<T>;
  static_assert(std::is_same<typename QKV::non_const_value_type, T>::value &&
                    std::is_same<typename CV::non_const_value_type, T>::value &&
                    std::is_same<typename SV::non_const_value_type, T>::value,
                "tptrain::kernels::cached_attention_forward: qkv, caches, scores and out hold one value type");
  const char* kernel = "cached_attention_forward";
  const std::int64_t n = qkv.extent(0), nh = k_cache.extent(0), P = k_cache.extent(1), d = k_cache.extent(2);
  const std::int64_t hl = nh * d, keys = p + n;
  detail::require(qkv.extent(1) == static_cast<std::size_t>(3 * hl) && out.extent(0) == qkv.extent(0) &&
                      out.extent(1) == static_cast<std::size_t>(hl) && v_cache.extent(0) == k_cache.extent(0) &&
                      v_cache.extent(1) == k_cache.extent(1) && v_cache.extent(2) == k_cache.extent(2),
                  kernel, "shapes must be qkv[n, 3*nh*d], caches [nh, P, d], out[n, nh*d]");
  detail::require(p >= 0 && keys <= P, kernel, "positions [p, p + n) must lie inside the cache");
  detail::require(scores.extent(0) == static_cast<std::size_t>(nh) && scores.extent(1) >= static_cast<std::size_t>(n) &&
                      scores.extent(2) >= static_cast<std::size_t>(keys),
                  kernel, "scores must be [nh, >= n, >= p + n]");
  detail::require(qkv.stride(1) == 1 && out.stride(1) == 1 && k_cache.stride(2) == 1 && v_cache.stride(2) == 1 &&
                      scores.stride(2) == 1,
                  kernel, "rows must be contiguous");
  detail::league_size<Exec>(nh * n, kernel);
  detail::require_blas_int(keys, kernel, "p + n");
  if (n == 0) return;
  const std::int64_t lq = qkv.stride(0), lc = k_cache.stride(1), ls = scores.stride(1), lo = out.stride(0);
  // S_h = Q_h K_hᵀ over the heads: Q_h is columns [h*d, h*d + d) of qkv, K_h rows [0, keys) of the cache.
  batched_gemm<Exec, T>(exec, 'N', 'T', n, keys, d, A(1), qkv.data(), lq, d, k_cache.data(), lc,
                        static_cast<std::int64_t>(k_cache.stride(0)), A(0), scores.data(), ls,
                        static_cast<std::int64_t>(scores.stride(0)), nh);
  const A scale = A(1) / kx::sqrt(static_cast<A>(d));
  using member = typename detail::Teams<Exec>::member_type;
  Kokkos::parallel_for(
      "tptrain::kernels::cached_attention_softmax", detail::teams(exec, nh * n, kernel),
      KOKKOS_LAMBDA(const member& team) {
        const std::int64_t r = team.league_rank(), h = r / n, i = r % n, seen = p + i + 1;
        A smax = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, seen),
            [&](const std::int64_t j, A& acc) { acc = kx::max(acc, A(scores(h, i, j))); }, Kokkos::Max<A>(smax));
        const A xmax = scale * smax;
        // team_sum / team_for, and no select in a loop that computes an exp: vectorised on
        // host backends (detail::team_for).
        const A sum = detail::team_sum<Exec, A>(
            team, 0, seen, [&](const std::int64_t j) { return kx::exp(scale * A(scores(h, i, j)) - xmax); });
        team.team_barrier();  // every thread has read its raw scores before any is replaced
        const A inv = A(1) / sum;  // sum >= 1: the max entry contributes exp(0)
        detail::team_for<Exec>(team, 0, seen, [&](const std::int64_t j) {
          scores(h, i, j) = T(kx::exp(scale * A(scores(h, i, j)) - xmax) * inv);
        });
        detail::team_for<Exec>(team, seen, keys, [&](const std::int64_t j) { scores(h, i, j) = T(0); });
      });
  // O_h = P_h V_h: into columns [h*d, h*d + d) of out.
  batched_gemm<Exec, T>(exec, 'N', 'N', n, d, keys, A(1), scores.data(), ls,
                        static_cast<std::int64_t>(scores.stride(0)), v_cache.data(), lc,
                        static_cast<std::int64_t>(v_cache.stride(0)), A(0), out.data(), lo, d, nh);
}

}  // namespace tptrain::kernels
