// The token routing of a mixture of experts (Mixtral's MixtralSparseMoeBlock; Fedus et al. 2021,
// Switch Transformers; src/model/mixture_of_experts.hpp runs them):
//   logits = x · Wrᵀ in acc_t, p = softmax(logits) over the E experts, the top k of p per token
//   (ties: the lower expert first), w = p_topk / Σ p_topk;
// the permutation of each token's k copies into rows sorted by expert (the positions are computed
// by the caller, on the host: they decide the all-to-all's counts anyway), its inverse with the
// weighted sum y = Σ_j w_j · out[pos_j], and the backward of each.
// A slot (t, j) is token t's j-th expert; pos(t, j) = -1 marks a slot dropped by a capacity.
// Precision: x, Wr and the rows may hold kx::bf16 / kx::fp16; the router's logits, probabilities,
// weights and their gradients are acc_t (fp32 for 16-bit), every sum accumulates in acc_t.
#pragma once

#include <cstdint>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

// probs [N, E], lse [N] = log Σ_e exp(logit) (the z-loss's), expert [N, k], weight [N, k].
template <class Exec, class XV, class WV, class PV, class LV, class IV, class RV>
void moe_route(const Exec& exec, const XV& x, const WV& wr, const PV& probs, const LV& lse, const IV& expert,
               const RV& weight) {
  detail::require(x.extent(1) == wr.extent(1) && probs.extent(0) == x.extent(0) && probs.extent(1) == wr.extent(0) &&
                      lse.extent(0) == x.extent(0) && expert.extent(0) == x.extent(0) &&
                      weight.extent(0) == x.extent(0) && weight.extent(1) == expert.extent(1) &&
                      expert.extent(1) <= wr.extent(0),
                  "moe_route", "shapes must be x[N,H], Wr[E,H], probs[N,E], lse[N], expert and weight [N,k<=E]");
  using A = typename PV::non_const_value_type;
  const int E = static_cast<int>(wr.extent(0)), k = static_cast<int>(expert.extent(1));
  const std::int64_t H = x.extent(1);
  using Policy = detail::Teams<Exec>;
  using Member = typename Policy::member_type;
  Kokkos::parallel_for(
      "tptrain::kernels::moe_route", Policy(exec, static_cast<int>(x.extent(0)), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t t = team.league_rank();
        for (int e = 0; e < E; ++e) {
          A logit = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, H),
              [&](const std::int64_t h, A& s) { s += static_cast<A>(x(t, h)) * static_cast<A>(wr(e, h)); }, logit);
          Kokkos::single(Kokkos::PerTeam(team), [&]() { probs(t, e) = logit; });
        }
        team.team_barrier();
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          A m = probs(t, 0);
          for (int e = 1; e < E; ++e) m = probs(t, e) > m ? probs(t, e) : m;
          A sum = 0;
          for (int e = 0; e < E; ++e) sum += kx::exp(probs(t, e) - m);
          for (int e = 0; e < E; ++e) probs(t, e) = kx::exp(probs(t, e) - m) / sum;
          lse(t) = m + kx::log(sum);
          A chosen = 0;
          for (int j = 0; j < k; ++j) {
            int best = -1;
            for (int e = 0; e < E; ++e) {
              bool taken = false;
              for (int i = 0; i < j; ++i) taken = taken || expert(t, i) == e;
              if (!taken && (best < 0 || probs(t, e) > probs(t, best))) best = e;
            }
            expert(t, j) = best;
            chosen += probs(t, best);
          }
          for (int j = 0; j < k; ++j) weight(t, j) = probs(t, expert(t, j)) / chosen;
        });
      });
}

// rows[pos(t, j)] = x[t] for every kept slot (rows overwritten there).
template <class Exec, class XV, class IV, class RV>
void moe_permute(const Exec& exec, const XV& x, const IV& pos, const RV& rows) {
  detail::require(pos.extent(0) == x.extent(0) && rows.extent(1) == x.extent(1), "moe_permute",
                  "shapes must be x[N,H], pos[N,k], rows[R,H]");
  const std::int64_t k = pos.extent(1);
  Kokkos::parallel_for(
      "tptrain::kernels::moe_permute", detail::range2d(exec, pos.extent(0) * k, x.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t s, const std::int64_t h) {
        const int p = pos(s / k, s % k);
        if (p >= 0) rows(p, h) = x(s / k, h);
      });
}

// y[t] = Σ_j w(t, j) · rows[pos(t, j)] over the kept slots (y overwritten); `weighted` = false:
// w = 1, the backward of moe_permute (each token's input gradient, the sum over its copies).
template <class Exec, class RV, class IV, class WV, class YV>
void moe_combine(const Exec& exec, const RV& rows, const IV& pos, const WV& weight, const YV& y,
                 const bool weighted = true) {
  detail::require(pos.extent(0) == y.extent(0) && rows.extent(1) == y.extent(1) && weight.extent(0) == pos.extent(0) &&
                      weight.extent(1) == pos.extent(1),
                  "moe_combine", "shapes must be rows[R,H], pos and weight [N,k], y[N,H]");
  using A = typename WV::non_const_value_type;
  const std::int64_t k = pos.extent(1);
  Kokkos::parallel_for(
      weighted ? "tptrain::kernels::moe_combine" : "tptrain::kernels::moe_permute_backward",
      detail::range2d(exec, y.extent(0), y.extent(1)), KOKKOS_LAMBDA(const std::int64_t t, const std::int64_t h) {
        A s = 0;
        for (std::int64_t j = 0; j < k; ++j) {
          const int p = pos(t, j);
          if (p >= 0) s += (weighted ? weight(t, j) : A(1)) * static_cast<A>(rows(p, h));
        }
        y(t, h) = s;
      });
}

// The backward of moe_combine: drows[pos(t, j)] = w(t, j) · dy[t] and dweight(t, j) =
// <dy[t], rows[pos(t, j)]> (0 for a dropped slot).
template <class Exec, class DYV, class RV, class IV, class WV, class DRV, class DWV>
void moe_combine_backward(const Exec& exec, const DYV& dy, const RV& rows, const IV& pos, const WV& weight,
                          const DRV& drows, const DWV& dweight) {
  detail::require(pos.extent(0) == dy.extent(0) && rows.extent(1) == dy.extent(1) &&
                      drows.extent(1) == dy.extent(1) && dweight.extent(0) == pos.extent(0) &&
                      dweight.extent(1) == pos.extent(1),
                  "moe_combine_backward", "shapes must be dy[N,H], rows and drows [R,H], pos, weight, dweight [N,k]");
  using A = typename DWV::non_const_value_type;
  const std::int64_t k = pos.extent(1), H = dy.extent(1);
  Kokkos::parallel_for(
      "tptrain::kernels::moe_combine_backward_rows", detail::range2d(exec, pos.extent(0) * k, H),
      KOKKOS_LAMBDA(const std::int64_t s, const std::int64_t h) {
        const int p = pos(s / k, s % k);
        if (p >= 0) drows(p, h) = weight(s / k, s % k) * static_cast<A>(dy(s / k, h));
      });
  using Policy = detail::Teams<Exec>;
  using Member = typename Policy::member_type;
  Kokkos::parallel_for(
      "tptrain::kernels::moe_combine_backward_weights",
      Policy(exec, static_cast<int>(pos.extent(0) * k), Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t s = team.league_rank(), t = s / k, j = s % k;
        const int p = pos(t, j);
        A d = 0;
        if (p >= 0)
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, H),
              [&](const std::int64_t h, A& sum) { sum += static_cast<A>(dy(t, h)) * static_cast<A>(rows(p, h)); }, d);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { dweight(t, j) = d; });
      });
}

// The router's backward to its logits (dlogits [N, E] overwritten), from
//   dweight [N, k]: the gradient of the renormalised top-k weights w_j = p_j / S, S = Σ_topk p:
//                   dp_j += (dw_j − Σ_i dw_i w_i) / S;
//   aux [E]:        the load-balancing loss's dL/dp_e, the same for every token (coefficient · E ·
//                   f_e / N, f_e the fraction of tokens routed to e, which carries no gradient);
//   z:              the z-loss's factor, dL/dlogit_e += z · lse · p_e (z = coefficient · 2 / N);
// then through the softmax: dlogit_e = p_e (dp_e − Σ_e' p_e' dp_e').
template <class Exec, class PV, class LV, class IV, class WV, class DWV, class AV, class DLV>
void moe_router_backward(const Exec& exec, const PV& probs, const LV& lse, const IV& expert, const WV& weight,
                         const DWV& dweight, const AV& aux, const typename DLV::non_const_value_type z,
                         const DLV& dlogits) {
  detail::require(dlogits.extent(0) == probs.extent(0) && dlogits.extent(1) == probs.extent(1) &&
                      aux.extent(0) == probs.extent(1) && dweight.extent(0) == expert.extent(0) &&
                      dweight.extent(1) == expert.extent(1),
                  "moe_router_backward", "shapes must be probs and dlogits [N,E], expert, weight, dweight [N,k], aux[E]");
  using A = typename DLV::non_const_value_type;
  const int E = static_cast<int>(probs.extent(1)), k = static_cast<int>(expert.extent(1));
  Kokkos::parallel_for(
      "tptrain::kernels::moe_router_backward", detail::range(exec, probs.extent(0)), KOKKOS_LAMBDA(const std::int64_t t) {
        A chosen = 0, dot = 0;
        for (int j = 0; j < k; ++j) {
          chosen += probs(t, expert(t, j));
          dot += dweight(t, j) * weight(t, j);
        }
        for (int e = 0; e < E; ++e) dlogits(t, e) = aux(e);  // dp, first
        for (int j = 0; j < k; ++j) dlogits(t, expert(t, j)) += (dweight(t, j) - dot) / chosen;
        A pdp = 0;
        for (int e = 0; e < E; ++e) pdp += probs(t, e) * dlogits(t, e);
        for (int e = 0; e < E; ++e) dlogits(t, e) = probs(t, e) * (dlogits(t, e) - pdp + z * lse(t));
      });
}

// dWr [E, H] += dlogitsᵀ · x, and dx [N, H] += dlogits · Wr (only when add_input_gradient).
template <class Exec, class DLV, class XV, class WV, class DWV, class DXV>
void moe_router_linear_backward(const Exec& exec, const DLV& dlogits, const XV& x, const WV& wr, const DWV& dwr,
                                const DXV& dx, const bool add_input_gradient) {
  detail::require(dlogits.extent(0) == x.extent(0) && dlogits.extent(1) == wr.extent(0) &&
                      wr.extent(1) == x.extent(1) && dwr.extent(0) == wr.extent(0) && dwr.extent(1) == wr.extent(1),
                  "moe_router_linear_backward", "shapes must be dlogits[N,E], x[N,H], Wr and dWr [E,H]");
  using A = typename DLV::non_const_value_type;
  const std::int64_t N = x.extent(0), E = wr.extent(0);
  Kokkos::parallel_for(
      "tptrain::kernels::moe_router_weight_gradient", detail::range2d(exec, E, x.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t e, const std::int64_t h) {
        A s = 0;
        for (std::int64_t t = 0; t < N; ++t) s += dlogits(t, e) * static_cast<A>(x(t, h));
        dwr(e, h) += s;
      });
  if (!add_input_gradient) return;
  using X = typename DXV::non_const_value_type;
  Kokkos::parallel_for(
      "tptrain::kernels::moe_router_input_gradient", detail::range2d(exec, N, x.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t t, const std::int64_t h) {
        A s = static_cast<A>(dx(t, h));
        for (std::int64_t e = 0; e < E; ++e) s += dlogits(t, e) * static_cast<A>(wr(e, h));
        dx(t, h) = static_cast<X>(s);
      });
}

// The router's statistics of a micro-batch: mean[e] = Σ_t p(t, e) / N, and Σ_t lse(t)² (the
// z-loss's sum) in mean[E]. mean has E + 1 elements.
template <class Exec, class PV, class LV, class MV>
void moe_router_statistics(const Exec& exec, const PV& probs, const LV& lse, const MV& mean) {
  detail::require(mean.extent(0) == probs.extent(1) + 1 && lse.extent(0) == probs.extent(0), "moe_router_statistics",
                  "shapes must be probs[N,E], lse[N], mean[E+1]");
  using A = typename MV::non_const_value_type;
  const std::int64_t N = probs.extent(0), E = probs.extent(1);
  Kokkos::parallel_for(
      "tptrain::kernels::moe_router_statistics", detail::range(exec, E + 1), KOKKOS_LAMBDA(const std::int64_t e) {
        A s = 0;
        if (e < E)
          for (std::int64_t t = 0; t < N; ++t) s += probs(t, e);
        else
          for (std::int64_t t = 0; t < N; ++t) s += lse(t) * lse(t);
        mean(e) = e < E ? s / A(N) : s;
      });
}

}  // namespace tptrain::kernels
