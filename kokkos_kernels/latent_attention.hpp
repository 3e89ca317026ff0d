// Multi-head latent attention's heads (DeepSeek-V2 §2.1.2-2.1.3; src/model/multi_head_latent_attention.hpp):
// the keys and values its latent's up-projection gives, kv [N, nh·(d_nope + d_v)] (head h's
// d_nope key features, then its d_v value features), and the rotary key k_R [N, d_R] every head
// shares, packed with the queries as the attention cores read grouped-query attention's QKV
// output with nkv = nh (flash_attention.hpp): qkv [N, nh·d_q | nh·d_q | nh·d_v], d_q = d_nope + d_R,
// head h's key [k_nope_h | k_R]. The queries' block is the query projection's output already; it
// is scaled here by the softmax factor beyond 1/√d_q (YaRN's mscale², DeepSeek-V3), 1 for none.
// Backward: the inverse, the rotary key's gradient summed over the heads (in acc_t, rounded once).
// Generation's latent cache is decompressed by latent_attention_expand: the same keys and values
// into the caches' [nh, P, d_q] and [nh, P, d_v] layout (kv_cache_append's).
// Views: rank-2 views of any layout (the latent's column blocks) with unit stride along a row.
#pragma once

#include <cstdint>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

// The heads' widths.
struct LatentHeads {
  std::int64_t heads = 1, nope = 1, rope = 2, value = 1;
  std::int64_t qk() const { return nope + rope; }
  std::int64_t kv_width() const { return heads * (nope + value); }  // of the up-projection
  std::int64_t packed_width() const { return heads * (2 * qk() + value); }
};

namespace detail {
template <class KV, class KR>
void check_latent_inputs(const KV& kv, const KR& k_rope, const LatentHeads& w, std::int64_t rows, const char* kernel) {
  require(w.heads > 0 && w.nope >= 0 && w.rope > 0 && w.value > 0, kernel, "need heads, d_R, d_v > 0 and d_nope >= 0");
  require(std::int64_t(kv.extent(0)) == rows && std::int64_t(k_rope.extent(0)) == rows &&
              std::int64_t(kv.extent(1)) == w.kv_width() && std::int64_t(k_rope.extent(1)) == w.rope,
          kernel, "shapes must be kv[N, nh*(d_nope + d_v)] and k_rope[N, d_R]");
}
}  // namespace detail

// K and V of qkv [N, nh·(2d_q + d_v)] from kv and k_rope; its Q block scaled by q_scale.
template <class Exec, class KV, class KR, class QKV>
void latent_attention_pack(const Exec& exec, const KV& kv, const KR& k_rope, const QKV& qkv, const LatentHeads& w,
                           const double q_scale = 1.0) {
  detail::check_view<Exec, KV, 2>();
  detail::check_view<Exec, KR, 2>();
  detail::check_view<Exec, QKV, 2>();
  detail::check_writable<QKV>();
  const std::int64_t N = qkv.extent(0);
  detail::check_latent_inputs(kv, k_rope, w, N, "latent_attention_pack");
  detail::require(std::int64_t(qkv.extent(1)) == w.packed_width(), "latent_attention_pack",
                  "qkv must be [N, nh*(2*(d_nope + d_R) + d_v)]");
  using T = typename QKV::non_const_value_type;
  using F = kx::acc_t<T>;
  const std::int64_t nh = w.heads, dn = w.nope, dq = w.qk(), dv = w.value, k0 = nh * dq, v0 = 2 * nh * dq;
  Kokkos::parallel_for(
      "tptrain::kernels::latent_attention_pack", detail::range2d(exec, N, nh * (dq + dv)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t c) {
        if (c < nh * dq) {
          const std::int64_t h = c / dq, e = c % dq;
          qkv(i, k0 + c) = e < dn ? T(kv(i, h * (dn + dv) + e)) : T(k_rope(i, e - dn));
        } else {
          const std::int64_t cv = c - nh * dq, h = cv / dv, e = cv % dv;
          qkv(i, v0 + cv) = T(kv(i, h * (dn + dv) + dn + e));
        }
      });
  if (q_scale == 1.0) return;
  const F scale(q_scale);
  Kokkos::parallel_for(
      "tptrain::kernels::latent_attention_scale_q", detail::range2d(exec, N, nh * dq),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t c) { qkv(i, c) = T(F(qkv(i, c)) * scale); });
}

// d_kv and d_k_rope (overwritten) from d_qkv; d_qkv's Q block scaled by q_scale in place.
template <class Exec, class DQKV, class DKV, class DKR>
void latent_attention_unpack(const Exec& exec, const DQKV& d_qkv, const DKV& d_kv, const DKR& d_k_rope,
                             const LatentHeads& w, const double q_scale = 1.0) {
  detail::check_view<Exec, DQKV, 2>();
  detail::check_view<Exec, DKV, 2>();
  detail::check_view<Exec, DKR, 2>();
  detail::check_writable<DKV>();
  detail::check_writable<DKR>();
  const std::int64_t N = d_qkv.extent(0);
  detail::check_latent_inputs(d_kv, d_k_rope, w, N, "latent_attention_unpack");
  detail::require(std::int64_t(d_qkv.extent(1)) == w.packed_width(), "latent_attention_unpack",
                  "d_qkv must be [N, nh*(2*(d_nope + d_R) + d_v)]");
  using T = typename DKV::non_const_value_type;
  using F = kx::acc_t<typename DQKV::non_const_value_type>;
  const std::int64_t nh = w.heads, dn = w.nope, dr = w.rope, dq = w.qk(), dv = w.value, k0 = nh * dq, v0 = 2 * nh * dq;
  Kokkos::parallel_for(
      "tptrain::kernels::latent_attention_unpack", detail::range2d(exec, N, nh * (dn + dv)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t c) {
        const std::int64_t h = c / (dn + dv), e = c % (dn + dv);
        d_kv(i, c) = e < dn ? T(d_qkv(i, k0 + h * dq + e)) : T(d_qkv(i, v0 + h * dv + e - dn));
      });
  using R = typename DKR::non_const_value_type;
  Kokkos::parallel_for(
      "tptrain::kernels::latent_attention_unpack_rope", detail::range2d(exec, N, dr),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        F sum(0);
        for (std::int64_t h = 0; h < nh; ++h) sum += F(d_qkv(i, k0 + h * dq + dn + j));
        d_k_rope(i, j) = R(sum);
      });
  if (q_scale == 1.0) return;
  const F scale(q_scale);
  using Q = typename DQKV::non_const_value_type;
  Kokkos::parallel_for(
      "tptrain::kernels::latent_attention_scale_dq", detail::range2d(exec, N, nh * dq),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t c) { d_qkv(i, c) = Q(F(d_qkv(i, c)) * scale); });
}

// Positions [0, m) of the caches k_cache [nh, P, d_q] and v_cache [nh, P, d_v] from the m rows of
// kv and k_rope (the decompressed latent cache).
template <class Exec, class KV, class KR, class CV>
void latent_attention_expand(const Exec& exec, const KV& kv, const KR& k_rope, const CV& k_cache, const CV& v_cache,
                             const LatentHeads& w) {
  detail::check_view<Exec, KV, 2>();
  detail::check_view<Exec, KR, 2>();
  detail::check_view<Exec, CV, 3>();
  detail::check_writable<CV>();
  const std::int64_t m = kv.extent(0);
  detail::check_latent_inputs(kv, k_rope, w, m, "latent_attention_expand");
  detail::require(std::int64_t(k_cache.extent(0)) == w.heads && std::int64_t(k_cache.extent(2)) == w.qk() &&
                      v_cache.extent(0) == k_cache.extent(0) && v_cache.extent(1) == k_cache.extent(1) &&
                      std::int64_t(v_cache.extent(2)) == w.value && m <= std::int64_t(k_cache.extent(1)),
                  "latent_attention_expand", "caches must be [nh, P, d_q] and [nh, P, d_v] with P >= the rows");
  using T = typename CV::non_const_value_type;
  const std::int64_t nh = w.heads, dn = w.nope, dq = w.qk(), dv = w.value;
  Kokkos::parallel_for(
      "tptrain::kernels::latent_attention_expand", detail::range2d(exec, m, nh * (dq + dv)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t c) {
        if (c < nh * dq) {
          const std::int64_t h = c / dq, e = c % dq;
          k_cache(h, i, e) = e < dn ? T(kv(i, h * (dn + dv) + e)) : T(k_rope(i, e - dn));
        } else {
          const std::int64_t cv = c - nh * dq, h = cv / dv, e = cv % dv;
          v_cache(h, i, e) = T(kv(i, h * (dn + dv) + dn + e));
        }
      });
}

}  // namespace tptrain::kernels
