// Causal multi-head self-attention core for the LOCAL heads of a tensor-parallel rank.
//
// qkv [B*S, 3*Hl], Hl = nh_local*d, columns [Q of local heads | K of local heads | V of local
// heads]; local head h occupies columns h*d .. h*d+d-1 inside each block. Row t = b*S + s.
//   S_ij = (q_i · k_j) / sqrt(d)   for j <= i (causal), masked otherwise
//   P_i  = softmax_j(S_ij)          (max-subtracted, numerically stable)
//   o_i  = Σ_j P_ij v_j             out(t, h*d + k)
// att [B, nh_local, S, S] keeps P (masked entries 0) for the backward pass.
//
// One team per (b, h, row) in both passes; dK/dV loop over the query rows i >= j of each key row
// j, so no atomics: results are bitwise reproducible for a fixed team size. Sums over head
// columns are blocked by CB (see detail::ColumnBlock; the order of each sum does not depend on it).
// Views: qkv/out/dout/dqkv rank 2, att rank 4, any layout, managed or unmanaged, subviews.
// B*nh_local*S, the number of teams, must fit in an int (std::length_error otherwise); indices
// derived from it are 64-bit.
#pragma once

#include <string>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/views.hpp"

namespace tptrain::kernels {

namespace detail {

// Σ_k a(ra, ca + k) · b(rb, cb + k) over k < n, in 8 interleaved partial sums (fixed order on
// every backend) so that CPUs are not bound by the latency of one dependent add chain.
template <class T, class AV, class BV>
KOKKOS_INLINE_FUNCTION T row_dot(const AV& a, const std::int64_t ra, const std::int64_t ca,
                                 const BV& b, const std::int64_t rb, const std::int64_t cb,
                                 const std::int64_t n) {
  T s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int m = 0; m < 8; ++m)
      s[m] += static_cast<T>(a(ra, ca + k + m)) * static_cast<T>(b(rb, cb + k + m));
  for (int m = 0; k < n; ++k, ++m)
    s[m] += static_cast<T>(a(ra, ca + k)) * static_cast<T>(b(rb, cb + k));
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// Query (or key) row r of the league, r = (b*nh + h)*S + i: batch b, local head h, position i.
// The league rank is an int, but everything derived from it is 64-bit: score offsets grow as
// S*S (2^32 at S = 65536) and token rows as B*S.
struct AttentionRow {
  std::int64_t b, h, i;
};
KOKKOS_INLINE_FUNCTION AttentionRow attention_row(const std::int64_t r, const std::int64_t S,
                                                  const std::int64_t nh) {
  return AttentionRow{r / (S * nh), (r / S) % nh, r % S};
}

// Row of token (b, s) in the [B*S, ...] activations.
KOKKOS_INLINE_FUNCTION std::int64_t token_row(const std::int64_t b, const std::int64_t S,
                                              const std::int64_t s) {
  return b * S + s;
}

}  // namespace detail

template <class Exec, class QKV, class OV, class AV, int CB = detail::ColumnBlock<Exec>::value>
void attention_forward(const Exec& exec,
                       const QKV& qkv,  // [B*S, 3*Hl]
                       const OV& out,   // [B*S, Hl] out (overwritten)
                       const AV& att,   // [B, nh_local, S, S] out: softmax probabilities
                       const std::int64_t B, const std::int64_t S, const std::int64_t nh_local,
                       const std::int64_t d) {
  detail::check_view<Exec, QKV, 2>();
  detail::check_view<Exec, OV, 2>();
  detail::check_view<Exec, AV, 4>();
  detail::check_writable<OV>();
  detail::check_writable<AV>();
  const std::int64_t hl = nh_local * d;
  detail::require(B >= 0 && S >= 0 && nh_local > 0 && d > 0, "attention_forward",
                  "need B, S >= 0 and nh_local, d > 0");
  detail::require(qkv.extent(0) == static_cast<std::size_t>(B * S) &&
                      qkv.extent(1) == static_cast<std::size_t>(3 * hl) &&
                      out.extent(0) == static_cast<std::size_t>(B * S) &&
                      out.extent(1) == static_cast<std::size_t>(hl),
                  "attention_forward",
                  "shapes must be qkv[B*S, 3*nh_local*d], out[B*S, nh_local*d]");
  detail::require(att.extent(0) == static_cast<std::size_t>(B) &&
                      att.extent(1) == static_cast<std::size_t>(nh_local) &&
                      att.extent(2) == static_cast<std::size_t>(S) &&
                      att.extent(3) == static_cast<std::size_t>(S),
                  "attention_forward", "att must be [B, nh_local, S, S]");
  using T = typename OV::non_const_value_type;
  using member = typename detail::Teams<Exec>::member_type;
  const T scale = T(1) / kx::sqrt(static_cast<T>(d));
  const std::int64_t nh = nh_local;
  const std::int64_t nkb = detail::ceil_div(d, CB);  // blocks of head columns
  const auto policy = detail::teams(exec, B * nh * S, "attention_forward");  // a team per query row
  Kokkos::parallel_for(
      "tptrain::kernels::attention_forward", policy, KOKKOS_LAMBDA(const member& team) {
        const detail::AttentionRow row = detail::attention_row(team.league_rank(), S, nh);
        const std::int64_t b = row.b, h = row.h, i = row.i;
        const std::int64_t ti = detail::token_row(b, S, i);  // query token row
        const std::int64_t qc = h * d, kc = hl + h * d, vc = 2 * hl + h * d;
        // scores (masked entries 0)
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, S), [&](const std::int64_t j) {
          att(b, h, i, j) =
              j <= i ? detail::row_dot<T>(qkv, ti, qc, qkv, detail::token_row(b, S, j), kc, d) * scale
                     : T(0);
        });
        team.team_barrier();
        T m = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, i + 1),
            [&](const std::int64_t j, T& acc) { acc = kx::max(acc, att(b, h, i, j)); },
            Kokkos::Max<T>(m));
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, i + 1),
            [&](const std::int64_t j, T& acc) {
              const T e = kx::exp(att(b, h, i, j) - m);
              att(b, h, i, j) = e;
              acc += e;
            },
            sum);
        team.team_barrier();
        const T inv = T(1) / sum;  // sum >= 1: the max entry contributes exp(0)
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, i + 1),
                             [&](const std::int64_t j) { att(b, h, i, j) *= inv; });
        team.team_barrier();
        // o_i = Σ_j P_ij v_j: a thread per block of CB head columns, j in order.
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nkb), [&](const std::int64_t kb) {
          const std::int64_t k0 = kb * CB;
          const int nk = static_cast<int>(kx::min<std::int64_t>(CB, d - k0));
          T acc[CB];
          for (int c = 0; c < CB; ++c) acc[c] = 0;
          for (std::int64_t j = 0; j <= i; ++j) {
            const T p = att(b, h, i, j);
            const std::int64_t tj = detail::token_row(b, S, j);
            for (int c = 0; c < nk; ++c) acc[c] += p * qkv(tj, vc + k0 + c);
          }
          for (int c = 0; c < nk; ++c) out(ti, qc + k0 + c) = acc[c];
        });
      });
}

// Backward with a caller-provided workspace dscores [B, nh_local, S, S] (same shape as att;
// overwritten with dL/dS, the gradient wrt the scaled scores):
//   dP_ij = do_i · v_j,  D_i = Σ_j P_ij dP_ij,  dS_ij = P_ij (dP_ij - D_i)
//   dq_i = scale Σ_{j<=i} dS_ij k_j,  dk_j = scale Σ_{i>=j} dS_ij q_i,  dv_j = Σ_{i>=j} P_ij do_i
// dqkv is overwritten (all three blocks).
template <class Exec, class DOV, class QKV, class AV, class DQKV, class DSV,
          int CB = detail::ColumnBlock<Exec>::value>
void attention_backward(const Exec& exec,
                        const DOV& dout,       // [B*S, Hl]
                        const QKV& qkv,        // [B*S, 3*Hl] forward input
                        const AV& att,         // [B, nh_local, S, S] from attention_forward
                        const DQKV& dqkv,      // [B*S, 3*Hl] out (overwritten)
                        const DSV& dscores) {  // [B, nh_local, S, S] workspace
  detail::check_view<Exec, DOV, 2>();
  detail::check_view<Exec, QKV, 2>();
  detail::check_view<Exec, AV, 4>();
  detail::check_view<Exec, DQKV, 2>();
  detail::check_view<Exec, DSV, 4>();
  detail::check_writable<DQKV>();
  detail::check_writable<DSV>();
  const std::int64_t B = att.extent(0);
  const std::int64_t nh = att.extent(1);
  const std::int64_t S = att.extent(2);
  detail::require(nh > 0 && att.extent(3) == static_cast<std::size_t>(S), "attention_backward",
                  "att must be [B, nh_local>0, S, S]");
  const std::int64_t hl = dout.extent(1);
  const std::int64_t d = hl / nh;
  detail::require(d > 0 && d * nh == hl, "attention_backward",
                  "dout.extent(1) must be nh_local*d with d > 0");
  const auto rows = static_cast<std::size_t>(B * S);
  detail::require(dout.extent(0) == rows && qkv.extent(0) == rows && dqkv.extent(0) == rows &&
                      qkv.extent(1) == static_cast<std::size_t>(3 * hl) &&
                      dqkv.extent(1) == static_cast<std::size_t>(3 * hl),
                  "attention_backward", "shapes must be dout[B*S,Hl], qkv,dqkv[B*S,3*Hl]");
  for (int r = 0; r < 4; ++r) {
    detail::require(dscores.extent(r) == att.extent(r), "attention_backward",
                    "dscores must have the shape of att");
  }
  using T = typename DQKV::non_const_value_type;
  using member = typename detail::Teams<Exec>::member_type;
  const T scale = T(1) / kx::sqrt(static_cast<T>(d));
  const std::int64_t nkb = detail::ceil_div(d, CB);  // blocks of head columns
  // One policy for both kernels, made before either runs (a refused size leaves dqkv untouched).
  const auto policy = detail::teams(exec, B * nh * S, "attention_backward");

  // Query rows: dS for row i, then dq_i.
  Kokkos::parallel_for(
      "tptrain::kernels::attention_backward_query", policy, KOKKOS_LAMBDA(const member& team) {
        const detail::AttentionRow row = detail::attention_row(team.league_rank(), S, nh);
        const std::int64_t b = row.b, h = row.h, i = row.i;
        const std::int64_t ti = detail::token_row(b, S, i);
        const std::int64_t qc = h * d, kc = hl + h * d, vc = 2 * hl + h * d;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, S), [&](const std::int64_t j) {
          dscores(b, h, i, j) =
              j <= i ? detail::row_dot<T>(dout, ti, qc, qkv, detail::token_row(b, S, j), vc, d) : T(0);
        });
        team.team_barrier();
        T dsum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, i + 1),
            [&](const std::int64_t j, T& acc) { acc += att(b, h, i, j) * dscores(b, h, i, j); },
            dsum);
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, i + 1), [&](const std::int64_t j) {
          dscores(b, h, i, j) = att(b, h, i, j) * (dscores(b, h, i, j) - dsum);
        });
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nkb), [&](const std::int64_t kb) {
          const std::int64_t k0 = kb * CB;
          const int nk = static_cast<int>(kx::min<std::int64_t>(CB, d - k0));
          T acc[CB];
          for (int c = 0; c < CB; ++c) acc[c] = 0;
          for (std::int64_t j = 0; j <= i; ++j) {
            const T ds = dscores(b, h, i, j);
            const std::int64_t tj = detail::token_row(b, S, j);
            for (int c = 0; c < nk; ++c) acc[c] += ds * qkv(tj, kc + k0 + c);
          }
          for (int c = 0; c < nk; ++c) dqkv(ti, qc + k0 + c) = scale * acc[c];
        });
      });

  // Key/value rows: dk_j, dv_j summed over the query rows i >= j in order.
  Kokkos::parallel_for(
      "tptrain::kernels::attention_backward_key_value", policy, KOKKOS_LAMBDA(const member& team) {
        const detail::AttentionRow row = detail::attention_row(team.league_rank(), S, nh);
        const std::int64_t b = row.b, h = row.h, j = row.i;  // key row j
        const std::int64_t tj = detail::token_row(b, S, j);
        const std::int64_t qc = h * d, kc = hl + h * d, vc = 2 * hl + h * d;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nkb), [&](const std::int64_t kb) {
          const std::int64_t k0 = kb * CB;
          const int nk = static_cast<int>(kx::min<std::int64_t>(CB, d - k0));
          T dk[CB], dv[CB];
          for (int c = 0; c < CB; ++c) dk[c] = dv[c] = 0;
          for (std::int64_t i = j; i < S; ++i) {
            const std::int64_t ti = detail::token_row(b, S, i);
            const T ds = dscores(b, h, i, j);
            const T p = att(b, h, i, j);
            for (int c = 0; c < nk; ++c) {
              dk[c] += ds * qkv(ti, qc + k0 + c);
              dv[c] += p * dout(ti, qc + k0 + c);
            }
          }
          for (int c = 0; c < nk; ++c) {
            dqkv(tj, kc + k0 + c) = scale * dk[c];
            dqkv(tj, vc + k0 + c) = dv[c];
          }
        });
      });
}

// Same, with an internally allocated dscores workspace (one allocation of att's size per
// call; pass a workspace to the overload above to avoid it in a training loop).
template <class Exec, class DOV, class QKV, class AV, class DQKV>
void attention_backward(const Exec& exec,
                        const DOV& dout,     // [B*S, Hl]
                        const QKV& qkv,      // [B*S, 3*Hl] forward input
                        const AV& att,       // [B, nh_local, S, S] from attention_forward
                        const DQKV& dqkv) {  // [B*S, 3*Hl] out (overwritten)
  detail::check_view<Exec, AV, 4>();
  using T = typename DQKV::non_const_value_type;
  Kokkos::View<T****, Kokkos::LayoutRight, typename DQKV::memory_space> dscores(
      Kokkos::view_alloc(exec, Kokkos::WithoutInitializing,
                         std::string("tptrain::kernels::attention_backward::dscores")),
      att.extent(0), att.extent(1), att.extent(2), att.extent(3));
  attention_backward(exec, dout, qkv, att, dqkv, dscores);
  // The workspace is freed on return: make sure the kernels using it are done.
  kx::fence(exec, "tptrain::kernels::attention_backward::free_dscores");
}

}  // namespace tptrain::kernels
