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
// j, so no atomics: results are bitwise reproducible for a fixed team size.
// Views: qkv/out/dout/dqkv rank 2, att rank 4, any layout, managed or unmanaged, subviews.
#pragma once

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/views.hpp"

#include <string>

namespace tptrain::kernels {

template <class Exec, class QKV, class OV, class AV>
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
                  "attention_forward", "shapes must be qkv[B*S, 3*nh_local*d], out[B*S, nh_local*d]");
  detail::require(att.extent(0) == static_cast<std::size_t>(B) &&
                      att.extent(1) == static_cast<std::size_t>(nh_local) &&
                      att.extent(2) == static_cast<std::size_t>(S) &&
                      att.extent(3) == static_cast<std::size_t>(S),
                  "attention_forward", "att must be [B, nh_local, S, S]");
  using T = typename OV::non_const_value_type;
  using member = typename detail::Teams<Exec>::member_type;
  const T scale = T(1) / kx::sqrt(static_cast<T>(d));
  const std::int64_t nh = nh_local;
  Kokkos::parallel_for(
      "tptrain::kernels::attention_forward", detail::teams(exec, B * nh * S),
      KOKKOS_LAMBDA(const member& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t i = r % S;
        const std::int64_t h = (r / S) % nh;
        const std::int64_t b = r / (S * nh);
        const std::int64_t ti = b * S + i;  // query token row
        const std::int64_t qc = h * d, kc = hl + h * d, vc = 2 * hl + h * d;
        // scores (masked entries 0)
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, S), [&](const std::int64_t j) {
          T s = 0;
          if (j <= i) {
            const std::int64_t tj = b * S + j;
            for (std::int64_t k = 0; k < d; ++k) s += qkv(ti, qc + k) * qkv(tj, kc + k);
            s *= scale;
          }
          att(b, h, i, j) = s;
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
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d), [&](const std::int64_t k) {
          T acc = 0;
          for (std::int64_t j = 0; j <= i; ++j) acc += att(b, h, i, j) * qkv(b * S + j, vc + k);
          out(ti, qc + k) = acc;
        });
      });
}

// Backward with a caller-provided workspace dscores [B, nh_local, S, S] (same shape as att;
// overwritten with dL/dS, the gradient wrt the scaled scores):
//   dP_ij = do_i · v_j,  D_i = Σ_j P_ij dP_ij,  dS_ij = P_ij (dP_ij - D_i)
//   dq_i = scale Σ_{j<=i} dS_ij k_j,  dk_j = scale Σ_{i>=j} dS_ij q_i,  dv_j = Σ_{i>=j} P_ij do_i
// dqkv is overwritten (all three blocks).
template <class Exec, class DOV, class QKV, class AV, class DQKV, class DSV>
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

  // Query rows: dS for row i, then dq_i.
  Kokkos::parallel_for(
      "tptrain::kernels::attention_backward_query", detail::teams(exec, B * nh * S),
      KOKKOS_LAMBDA(const member& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t i = r % S;
        const std::int64_t h = (r / S) % nh;
        const std::int64_t b = r / (S * nh);
        const std::int64_t ti = b * S + i;
        const std::int64_t qc = h * d, kc = hl + h * d, vc = 2 * hl + h * d;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, S), [&](const std::int64_t j) {
          T dp = 0;
          if (j <= i) {
            const std::int64_t tj = b * S + j;
            for (std::int64_t k = 0; k < d; ++k) dp += dout(ti, qc + k) * qkv(tj, vc + k);
          }
          dscores(b, h, i, j) = dp;
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
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d), [&](const std::int64_t k) {
          T acc = 0;
          for (std::int64_t j = 0; j <= i; ++j) acc += dscores(b, h, i, j) * qkv(b * S + j, kc + k);
          dqkv(ti, qc + k) = scale * acc;
        });
      });

  // Key/value rows: dk_j, dv_j summed over the query rows i >= j in order.
  Kokkos::parallel_for(
      "tptrain::kernels::attention_backward_key_value", detail::teams(exec, B * nh * S),
      KOKKOS_LAMBDA(const member& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t j = r % S;
        const std::int64_t h = (r / S) % nh;
        const std::int64_t b = r / (S * nh);
        const std::int64_t tj = b * S + j;
        const std::int64_t qc = h * d, kc = hl + h * d, vc = 2 * hl + h * d;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d), [&](const std::int64_t k) {
          T dk = 0;
          T dv = 0;
          for (std::int64_t i = j; i < S; ++i) {
            const std::int64_t ti = b * S + i;
            dk += dscores(b, h, i, j) * qkv(ti, qc + k);
            dv += att(b, h, i, j) * dout(ti, qc + k);
          }
          dqkv(tj, kc + k) = scale * dk;
          dqkv(tj, vc + k) = dv;
        });
      });
}

// Same, with an internally allocated dscores workspace (one allocation of att's size per
// call; pass a workspace to the overload above to avoid it in a training loop).
template <class Exec, class DOV, class QKV, class AV, class DQKV>
void attention_backward(const Exec& exec,
                        const DOV& dout,    // [B*S, Hl]
                        const QKV& qkv,     // [B*S, 3*Hl] forward input
                        const AV& att,      // [B, nh_local, S, S] from attention_forward
                        const DQKV& dqkv) { // [B*S, 3*Hl] out (overwritten)
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
