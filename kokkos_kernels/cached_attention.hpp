// Causal attention of n new query rows against a key/value cache (generation with a KV cache,
// src/model/kv_cache.hpp): the forward of attention.hpp for the rows at positions [p, p + n) of
// one sequence, whose keys and values for positions [0, p) were stored by earlier calls.
//
// qkv [n, (nh + 2·nkv)·d] as the QKV layer writes it (columns [Q: nh heads | K: nkv | V: nkv],
// local head h at h*d inside each block; nkv = nh without grouped-query attention); the caches
// k_cache, v_cache [nkv, P, d] hold position j of key/value head g at (g, j, :), P >= p + n the
// most positions they can hold: nkv·d per token, not nh·d. Query head h reads key/value head
// g = h / (nh/nkv), Hugging Face's repeat_kv without the copy. Per query head h, with
// scale = 1/sqrt(d):
//   K_g[p:p+n), V_g[p:p+n) = the new rows' K and V      (kv_cache_append)
//   S = Q_h K_g[0:p+n)ᵀ                                 (strided-batched GEMMs: one over the heads,
//                                                        or one per key/value head over its group)
//   P_ij = exp(scale S_ij - max) / Σ for j <= p + i, 0 otherwise
//   O_h = P V_g[0:p+n)
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

// out [n, Hl] = attention of the n query rows of qkv at positions [p, p + n) over the cached keys
// and values [0, p + n) (kv_cache_append must have stored the new rows' first).
template <class Exec, class QKV, class CV, class SV, class OV>
void cached_attention_forward(const Exec& exec, const QKV& qkv /*[n, (nh + 2 nkv) d]*/,
                              const CV& k_cache /*[nkv, P, d]*/, const CV& v_cache /*[nkv, P, d]*/,
                              const std::int64_t p, const SV& scores /*[nh, >= n, >= p + n] workspace*/,
                              const OV& out /*[n, nh d]*/) {
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
  const std::int64_t n = qkv.extent(0), nkv = k_cache.extent(0), P = k_cache.extent(1), d = k_cache.extent(2);
  const std::int64_t nh = detail::cached_query_heads(qkv.extent(1), nkv, d);
  const std::int64_t hl = nh * d, keys = p + n, group = nh > 0 ? nh / nkv : 1;
  detail::require(nh > 0 && out.extent(0) == qkv.extent(0) && out.extent(1) == static_cast<std::size_t>(hl) &&
                      v_cache.extent(0) == k_cache.extent(0) && v_cache.extent(1) == k_cache.extent(1) &&
                      v_cache.extent(2) == k_cache.extent(2),
                  kernel, "shapes must be qkv[n, (nh + 2*nkv)*d] with nkv dividing nh, caches [nkv, P, d], out[n, nh*d]");
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
  const std::int64_t cs = k_cache.stride(0), ss = scores.stride(0);
  // S_h = Q_h K_gᵀ: Q_h is columns [h*d, h*d + d) of qkv, K_g rows [0, keys) of the cache. Without
  // grouped-query attention one GEMM batched over the heads; with it one per key/value head, its
  // batch the group of query heads that read it (K's batch stride 0).
  if (group == 1)
    batched_gemm<Exec, T>(exec, 'N', 'T', n, keys, d, A(1), qkv.data(), lq, d, k_cache.data(), lc, cs, A(0),
                          scores.data(), ls, ss, nh);
  else
    for (std::int64_t g = 0; g < nkv; ++g)
      batched_gemm<Exec, T>(exec, 'N', 'T', n, keys, d, A(1), qkv.data() + g * group * d, lq, d,
                            k_cache.data() + g * cs, lc, 0, A(0), scores.data() + g * group * ss, ls, ss, group);
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
  // O_h = P_h V_g: into columns [h*d, h*d + d) of out.
  const std::int64_t vs = v_cache.stride(0);
  if (group == 1)
    batched_gemm<Exec, T>(exec, 'N', 'N', n, d, keys, A(1), scores.data(), ls, ss, v_cache.data(), lc, vs, A(0),
                          out.data(), lo, d, nh);
  else
    for (std::int64_t g = 0; g < nkv; ++g)
      batched_gemm<Exec, T>(exec, 'N', 'N', n, d, keys, A(1), scores.data() + g * group * ss, ls, ss,
                            v_cache.data() + g * vs, lc, 0, A(0), out.data() + g * group * d, lo, d, group);
}

}  // namespace tptrain::kernels
