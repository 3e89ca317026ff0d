// The token routing of a mixture of experts (Mixtral's MixtralSparseMoeBlock; Fedus et al. 2021,
// Switch Transformers; DeepSeek-V3's DeepseekV3TopkRouter; src/model/mixture_of_experts.hpp runs
// them):
//   logits = x · Wrᵀ in acc_t; scores s = softmax(logits) over the E experts (Mixtral) or
//   sigmoid(logits) (DeepSeek-V3); the choice scores c = s + b (b a per-expert bias that only
//   chooses, DeepSeek-V3's auxiliary-loss-free balancing; none: 0); with G > 1 groups of E/G
//   experts, only the experts of the g groups of highest score (the sum of a group's two highest
//   c) compete, the others' c set to 0 (as Hugging Face's masked_fill); the top k of c per token
//   (ties: the lower expert, the lower group first); their weights w = s_topk / (Σ s_topk [+ 1e-20
//   with sigmoid]) when normalised (else s_topk), times the routed scaling factor;
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

// How the router turns logits into chosen experts and weights (Mixtral's: the defaults).
struct MoeRouting {
  bool sigmoid = false;  // scores sigmoid(logit) rather than the softmax over the experts
  int groups = 1;        // G groups of E/G experts (at most 64), of which
  int groups_per_token = 1;  // g compete for each token
  bool normalize = true;     // the top k's scores renormalised to sum to 1
  double scale = 1.0;        // the routed scaling factor on the weights
};

namespace detail {
// Token t's choice score of expert e: its score plus the bias, 0 when its group is masked out
// (bit g of `groups` clear; every group when G = 1).
template <class PV, class BV>
KOKKOS_INLINE_FUNCTION typename PV::non_const_value_type moe_choice_score(const PV& probs, const BV& bias,
                                                                         const std::int64_t t, const int e,
                                                                         const int per_group,
                                                                         const std::uint64_t groups) {
  using A = typename PV::non_const_value_type;
  if (!((groups >> (e / per_group)) & 1u)) return A(0);
  return bias.extent(0) > 0 ? probs(t, e) + A(bias(e)) : probs(t, e);
}
}  // namespace detail

// probs [N, E] (the scores s), lse [N] = log Σ_e exp(logit) (the z-loss's), expert [N, k],
// weight [N, k]; bias [E] or empty.
template <class Exec, class XV, class WV, class BV, class PV, class LV, class IV, class RV>
void moe_route(const Exec& exec, const XV& x, const WV& wr, const BV& bias, const PV& probs, const LV& lse,
               const IV& expert, const RV& weight, const MoeRouting& routing = {}) {
  detail::require(x.extent(1) == wr.extent(1) && probs.extent(0) == x.extent(0) && probs.extent(1) == wr.extent(0) &&
                      lse.extent(0) == x.extent(0) && expert.extent(0) == x.extent(0) &&
                      weight.extent(0) == x.extent(0) && weight.extent(1) == expert.extent(1) &&
                      expert.extent(1) <= wr.extent(0) && (bias.extent(0) == 0 || bias.extent(0) == wr.extent(0)),
                  "moe_route", "shapes must be x[N,H], Wr[E,H], bias[E] or empty, probs[N,E], lse[N], expert and "
                  "weight [N,k<=E]");
  const int G = routing.groups, g = routing.groups_per_token;
  detail::require(G >= 1 && G <= 64 && wr.extent(0) % static_cast<std::size_t>(G) == 0 && g >= 1 && g <= G &&
                      (G == 1 || wr.extent(0) / static_cast<std::size_t>(G) >= 2) &&
                      expert.extent(1) <= static_cast<std::size_t>(g) * (wr.extent(0) / static_cast<std::size_t>(G)),
                  "moe_route", "groups: 1 <= G <= 64 dividing E (at least 2 experts each), 1 <= g <= G, k <= g·E/G");
  using A = typename PV::non_const_value_type;
  const int E = static_cast<int>(wr.extent(0)), k = static_cast<int>(expert.extent(1)), per_group = E / G;
  const bool sigmoid = routing.sigmoid, normalize = routing.normalize;
  const A scale = static_cast<A>(routing.scale);
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
          if (sigmoid)
            for (int e = 0; e < E; ++e) probs(t, e) = A(1) / (A(1) + kx::exp(-probs(t, e)));
          else
            for (int e = 0; e < E; ++e) probs(t, e) = kx::exp(probs(t, e) - m) / sum;
          lse(t) = m + kx::log(sum);
          // The g groups whose two best choice scores sum highest (every group when G = 1).
          std::uint64_t open = G == 1 ? 1u : 0u;
          for (int j = 0; j < (G == 1 ? 0 : g); ++j) {
            int best = -1;
            A best_score = 0;
            for (int q = 0; q < G; ++q) {
              if ((open >> q) & 1u) continue;
              A first = 0, second = 0;  // the group's two highest (per_group >= 2)
              for (int i = 0; i < per_group; ++i) {
                const A c = detail::moe_choice_score(probs, bias, t, q * per_group + i, per_group, ~std::uint64_t(0));
                if (i == 0) {
                  first = c;
                } else if (c > first) {
                  second = first;
                  first = c;
                } else if (i == 1 || c > second) {
                  second = c;
                }
              }
              if (best < 0 || first + second > best_score) {
                best = q;
                best_score = first + second;
              }
            }
            open |= std::uint64_t(1) << best;
          }
          A chosen = 0;
          for (int j = 0; j < k; ++j) {
            int best = -1;
            A best_score = 0;
            for (int e = 0; e < E; ++e) {
              bool taken = false;
              for (int i = 0; i < j; ++i) taken = taken || expert(t, i) == e;
              const A c = detail::moe_choice_score(probs, bias, t, e, per_group, open);
              if (!taken && (best < 0 || c > best_score)) {
                best = e;
                best_score = c;
              }
            }
            expert(t, j) = best;
            chosen += probs(t, best);
          }
          const A denominator = normalize ? chosen + (sigmoid ? A(1e-20) : A(0)) : A(1);
          for (int j = 0; j < k; ++j) weight(t, j) = scale * probs(t, expert(t, j)) / denominator;
        });
      });
}

// rows[pos(t, j)] = x[t] for every kept slot (rows overwritten there).
template <class Exec, class XV, class IV, class RV>
void moe_permute(const Exec& exec, const XV& x, const IV& pos, const RV& rows) {
  detail::require(pos.extent(0) == x.extent(0) && rows.extent(1) == x.extent(1), "moe_permute",
                  "shapes must be x[N,H], pos[N,k], rows[R,H]");
  // A team per slot, its threads along the row (coalesced on a GPU, a contiguous copy on a core;
  // the slot's token and copy divided out once per row, not per element).
  const std::int64_t k = pos.extent(1), H = x.extent(1);
  using Member = typename detail::Teams<Exec>::member_type;
  Kokkos::parallel_for(
      "tptrain::kernels::moe_permute", detail::teams(exec, pos.extent(0) * k, "moe_permute"),
      KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t t = team.league_rank() / k, j = team.league_rank() % k;
        const int p = pos(t, j);
        if (p < 0) return;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, H), [&](const std::int64_t h) { rows(p, h) = x(t, h); });
      });
}

// y[t] = Σ_j w(t, j) · rows[pos(t, j)] over the kept slots, plus added[t] (y overwritten; added
// empty: nothing; DeepSeekMoE's shared experts' output, summed in acc_t with the routed ones);
// `weighted` = false: w = 1, the backward of moe_permute (each token's input gradient, the sum
// over its copies).
template <class Exec, class RV, class IV, class WV, class YV, class AV = RV>
void moe_combine(const Exec& exec, const RV& rows, const IV& pos, const WV& weight, const YV& y,
                 const bool weighted = true, const AV& added = AV()) {
  const bool add = added.extent(0) > 0;
  detail::require(pos.extent(0) == y.extent(0) && rows.extent(1) == y.extent(1) && weight.extent(0) == pos.extent(0) &&
                      weight.extent(1) == pos.extent(1) &&
                      (!add || (added.extent(0) == y.extent(0) && added.extent(1) == y.extent(1))),
                  "moe_combine", "shapes must be rows[R,H], pos and weight [N,k], y and added [N,H]");
  using A = typename WV::non_const_value_type;
  // A team per token, each thread a run of kRun adjacent columns: a copy's position and weight
  // are read once per run, and the run's sums (each over the copies in order, as one column
  // alone) vectorise on a core; adjacent threads read adjacent runs on a GPU.
  constexpr std::int64_t kRun = 8;
  const std::int64_t k = pos.extent(1), H = y.extent(1), runs = (H + kRun - 1) / kRun;
  using Member = typename detail::Teams<Exec>::member_type;
  Kokkos::parallel_for(
      weighted ? "tptrain::kernels::moe_combine" : "tptrain::kernels::moe_permute_backward",
      detail::teams(exec, y.extent(0), "moe_combine"), KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t t = team.league_rank();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, runs), [&](const std::int64_t run) {
          const std::int64_t h0 = run * kRun, n = H - h0 < kRun ? H - h0 : kRun;
          A s[kRun] = {};
          for (std::int64_t j = 0; j < k; ++j) {
            const int p = pos(t, j);
            if (p < 0) continue;
            const A w = weighted ? weight(t, j) : A(1);
            for (std::int64_t i = 0; i < n; ++i) s[i] += w * static_cast<A>(rows(p, h0 + i));
          }
          for (std::int64_t i = 0; i < n; ++i) {
            if (add) s[i] += static_cast<A>(added(t, h0 + i));
            y(t, h0 + i) = s[i];
          }
        });
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
  using Policy = detail::Teams<Exec>;
  using Member = typename Policy::member_type;
  Kokkos::parallel_for(
      "tptrain::kernels::moe_combine_backward_rows", detail::teams(exec, pos.extent(0) * k, "moe_combine_backward"),
      KOKKOS_LAMBDA(const Member& team) {
        const std::int64_t t = team.league_rank() / k, j = team.league_rank() % k;
        const int p = pos(t, j);
        if (p < 0) return;
        const A w = weight(t, j);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, H),
                             [&](const std::int64_t h) { drows(p, h) = w * static_cast<A>(dy(t, h)); });
      });
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
//   dweight [N, k]: the gradient of the top-k weights w_j = c · s_j / D (D = Σ_topk s [+ 1e-20]
//                   when normalised, else 1; c the scaling factor): ds_j += (c · dw_j − Σ_i dw_i w_i) / D,
//                   or c · dw_j unnormalised (the bias and the group mask only choose: no gradient);
//   aux [G·E]:      the load-balancing loss's dL/dp_e, the same for every token of a group of
//                   group_rows rows (0: one group; coefficient · E · f_e / N, f_e the fraction of
//                   tokens routed to e, which carries no gradient; per sequence: DeepSeek-V3's);
//                   p is the softmax, or with sigmoid scores s / (Σ_e s_e + 1e-20), Megatron-Core's;
//   z:              the z-loss's factor, dL/dlogit_e += z · lse · p_e (z = coefficient · 2 / N;
//                   softmax scores only);
// then through the scores: dlogit_e = p_e (dp_e − Σ_e' p_e' dp_e') for the softmax, ds_e · s_e (1 − s_e)
// for the sigmoid.
template <class Exec, class PV, class LV, class IV, class WV, class DWV, class AV, class DLV>
void moe_router_backward(const Exec& exec, const PV& probs, const LV& lse, const IV& expert, const WV& weight,
                         const DWV& dweight, const AV& aux, const typename DLV::non_const_value_type z,
                         const DLV& dlogits, const MoeRouting& routing = {}, std::int64_t group_rows = 0) {
  const std::int64_t N = probs.extent(0), groups_by_experts = std::int64_t(aux.extent(0));
  if (group_rows <= 0) group_rows = N > 0 ? N : 1;
  detail::require(dlogits.extent(0) == probs.extent(0) && dlogits.extent(1) == probs.extent(1) &&
                      N % group_rows == 0 &&
                      groups_by_experts == std::max<std::int64_t>(1, N / group_rows) * std::int64_t(probs.extent(1)) &&
                      dweight.extent(0) == expert.extent(0) && dweight.extent(1) == expert.extent(1),
                  "moe_router_backward",
                  "shapes must be probs and dlogits [N,E], expert, weight, dweight [N,k], aux[G·E] of G groups of rows");
  detail::require(!routing.sigmoid || z == 0, "moe_router_backward", "the z-loss needs softmax scores");
  using A = typename DLV::non_const_value_type;
  const int E = static_cast<int>(probs.extent(1)), k = static_cast<int>(expert.extent(1));
  const bool sigmoid = routing.sigmoid, normalize = routing.normalize;
  const A scale = static_cast<A>(routing.scale);
  Kokkos::parallel_for(
      "tptrain::kernels::moe_router_backward", detail::range(exec, probs.extent(0)), KOKKOS_LAMBDA(const std::int64_t t) {
        A chosen = 0, dot = 0;
        for (int j = 0; j < k; ++j) {
          chosen += probs(t, expert(t, j));
          dot += dweight(t, j) * weight(t, j);
        }
        const std::int64_t g = (t / group_rows) * E;  // the row's group's aux gradient
        if (sigmoid) {  // the aux loss's gradient through p = s / T into ds, first
          A total = 0, aux_dot = 0;
          for (int e = 0; e < E; ++e) {
            total += probs(t, e);
            aux_dot += aux(g + e) * probs(t, e);
          }
          total += A(1e-20);
          for (int e = 0; e < E; ++e) dlogits(t, e) = aux(g + e) / total - aux_dot / (total * total);
        } else {
          for (int e = 0; e < E; ++e) dlogits(t, e) = aux(g + e);  // dp, first
        }
        const A denominator = chosen + (sigmoid ? A(1e-20) : A(0));
        for (int j = 0; j < k; ++j)
          dlogits(t, expert(t, j)) += normalize ? (scale * dweight(t, j) - dot) / denominator : scale * dweight(t, j);
        if (sigmoid) {
          for (int e = 0; e < E; ++e) dlogits(t, e) *= probs(t, e) * (A(1) - probs(t, e));
          return;
        }
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

// The router's statistics of a micro-batch, its N rows in G groups of group_rows (0: one group,
// all of them; DeepSeek-V3's sequence-wise loss: the sequences): mean[g·E + e] = Σ_{t of g}
// p(t, e) / group_rows (p the softmax, or with sigmoid scores s / (Σ_e s_e + 1e-20): the
// load-balancing loss's), and Σ_t lse(t)² (the z-loss's sum) in mean[G·E]. mean has G·E + 1
// elements.
template <class Exec, class PV, class LV, class MV>
void moe_router_statistics(const Exec& exec, const PV& probs, const LV& lse, const MV& mean, const bool sigmoid = false,
                           std::int64_t group_rows = 0) {
  const std::int64_t N = probs.extent(0), E = probs.extent(1);
  if (group_rows <= 0) group_rows = N > 0 ? N : 1;
  const std::int64_t G = std::max<std::int64_t>(1, N / group_rows);
  detail::require(N % group_rows == 0 && std::int64_t(mean.extent(0)) == G * E + 1 && lse.extent(0) == probs.extent(0),
                  "moe_router_statistics", "shapes must be probs[N,E], lse[N], mean[G·E+1] of G groups of rows");
  using A = typename MV::non_const_value_type;
  Kokkos::parallel_for(
      "tptrain::kernels::moe_router_statistics", detail::range(exec, G * E + 1), KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t e = i % E, first = (i / E) * group_rows, last = i < G * E ? first + group_rows : 0;
        A s = 0;
        if (i < G * E && !sigmoid) {
          for (std::int64_t t = first; t < last; ++t) s += probs(t, e);
        } else if (i < G * E) {
          for (std::int64_t t = first; t < last; ++t) {
            A total = 0;
            for (std::int64_t f = 0; f < E; ++f) total += probs(t, f);
            s += probs(t, e) / (total + A(1e-20));
          }
        } else {
          for (std::int64_t t = 0; t < N; ++t) s += lse(t) * lse(t);
        }
        mean(i) = i < G * E ? s / A(group_rows) : s;
      });
}

}  // namespace tptrain::kernels
