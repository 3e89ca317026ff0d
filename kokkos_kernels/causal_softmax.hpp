// The fused row passes of causal attention (attention.hpp) over the [B, nh, S, S] scores:
// mask + scale + softmax (saving each row's log normaliser lse), the probabilities rebuilt from
// lse, and the softmax backward of a tile of query rows.
//   P_ij = exp(scale S_ij - lse_i) for doc_i <= j <= i, 0 otherwise,
//   lse_i = log Σ_{doc_i<=j<=i} exp(scale S_ij)
//   dS_ij = scale P_ij (dP_ij - Σ_l P_il dP_il)  (softmax Jacobian, masked 0)
// doc (optional, nullptr: 0 for every row): doc[b·S + i] the first position of row i's document
// (data.document_mask; non-decreasing along a sequence, <= i).
//
// One Kokkos team per row (b, h, i) with team reductions: no atomics, so results are bitwise
// reproducible for a fixed team size. The passes that read a row twice or more keep it in team
// scratch when it fits (detail::ScratchRow), with the same arithmetic as the global-memory path.
//
// Precision: scores and probabilities hold the storage type T (float, double, kx::bf16 or
// kx::fp16); every max, exp and sum is computed in acc_t<T> and each output rounded once. lse
// holds acc_t<T> (float for 16-bit T): the backward rebuilds P from it, and a rounded lse would
// shift every recomputed P.
// Views: rank 4 [B, nh, S, S] (the backward's tile [B, nh, >= rows, S]), lse rank 1 [B*nh*S],
// entry (b*nh + h)*S + i. B*nh*S, the number of teams, must fit in a league
// (detail::league_size, std::length_error otherwise); indices are 64-bit.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

namespace detail {

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

template <class PV>
void check_scores(const PV& probs, const char* kernel) {
  detail::require(probs.extent(2) == probs.extent(3), kernel, "scores must be [B, nh, S, S]");
}

}  // namespace detail

// From scores [B, nh, S, S] = Q Kᵀ (unscaled) into probs of the same shape (the same view for
// in place): P_ij = softmax_{j<=i}(scale S_ij), masked entries 0; lse [B*nh*S] gets the log of
// each row's normaliser, max + log Σ exp(x - max) over the scaled scores x = scale S_ij (so that
// P_ij = exp(x_ij - lse_i)). Out of place, the scores are left as they are (recompute = none
// keeps them for the backward); the arithmetic is the same either way.
template <class Exec, class SV, class PV, class LV>
void causal_softmax_forward(const Exec& exec, const SV& scores, const PV& probs, const LV& lse,
                            const kx::acc_t<typename PV::non_const_value_type> scale,
                            const std::int32_t* doc = nullptr) {
  detail::check_view<Exec, SV, 4>();
  detail::check_view<Exec, PV, 4>();
  detail::check_view<Exec, LV, 1>();
  detail::check_writable<PV>();
  detail::check_writable<LV>();
  detail::check_scores(scores, "causal_softmax_forward");
  static_assert(std::is_same<typename SV::non_const_value_type, typename PV::non_const_value_type>::value,
                "tptrain::kernels::causal_softmax_forward: scores and probs hold one value type");
  for (int d = 0; d < 4; ++d)
    detail::require(probs.extent(d) == scores.extent(d), "causal_softmax_forward",
                    "probs must have the shape of scores");
  const std::int64_t nh = scores.extent(1), S = scores.extent(2);
  const std::int64_t rows = static_cast<std::int64_t>(scores.extent(0)) * nh * S;
  detail::require(lse.extent(0) == static_cast<std::size_t>(rows), "causal_softmax_forward",
                  "lse must be [B*nh*S]");
  using T = kx::acc_t<typename PV::non_const_value_type>;
  using member = typename detail::Teams<Exec>::member_type;
  using Row = detail::ScratchRow<Exec, T>;
  // The row's raw scores, then its exps, stay in team scratch when they fit (S = 2048: 8 KiB in
  // float): global memory sees one read of the row's causal part and one write of the row,
  // instead of three reads and two writes. The scratch row is in acc_t (float for 16-bit
  // scores), so that the exps are not rounded before they are normalised.
  const std::size_t row_bytes = detail::scratch_row_bytes<Exec, T>(S);
  // 16-bit scores without the scratch row: the exps are not written to scores (that would round
  // them twice) but computed again in the normalising pass, which rounds once.
  constexpr bool recompute_exp = kx::is_half_v<typename PV::non_const_value_type>;
  // Compile-time false on host backends: their loops carry no scratch branch at all.
  constexpr bool can_cache = detail::scratch_rows<Exec>();
  const auto row_teams = detail::row_teams(exec, rows, row_bytes, "causal_softmax_forward");
  const bool fits = row_teams.cached;
  const bool in_place = scores.data() == probs.data();
  Kokkos::parallel_for(
      "tptrain::kernels::causal_softmax_forward", row_teams.policy, KOKKOS_LAMBDA(const member& team) {
        const bool cached = can_cache && fits;
        const std::int64_t r = team.league_rank();
        const detail::AttentionRow row = detail::attention_row(r, S, nh);
        const std::int64_t b = row.b, h = row.h, i = row.i, lo = doc ? std::int64_t(doc[b * S + i]) : 0;
        const Row buf = cached ? Row(team.team_scratch(0), S) : Row();
        // scale > 0, and rounding is monotone: max_j fl(scale·s_j) = fl(scale·max_j s_j).
        T smax = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, lo, i + 1),
            [&](const std::int64_t j, T& acc) {
              const T s = scores(b, h, i, j);
              if (cached) buf(j) = s;
              acc = kx::max(acc, s);
            },
            Kokkos::Max<T>(smax));
        team.team_barrier();  // every read of the raw scores is done before they are replaced (in place)
        const T xmax = scale * smax;
        T sum = 0;
        if (cached) {  // the row's raw scores, then its exps, in team scratch
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, S),
              [&](const std::int64_t j, T& acc) {
                const bool seen = lo <= j && j <= i;
                const T e = seen ? kx::exp(scale * buf(j) - xmax) : T(0);
                if (seen) buf(j) = e;
                acc += e;
              },
              sum);
          team.team_barrier();  // the ranges differ: another thread may have written exp
          const T inv = T(1) / sum;  // sum >= 1: the max entry contributes exp(0) = 1
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, S), [&](const std::int64_t j) {
            probs(b, h, i, j) = lo <= j && j <= i ? buf(j) * inv : T(0);
          });
        } else if (recompute_exp) {  // as below, without writing the exps
          sum = detail::team_sum<Exec, T>(team, lo, i + 1, [&](const std::int64_t j) {
            return kx::exp(scale * T(scores(b, h, i, j)) - xmax);
          });
          team.team_barrier();  // every thread has read its raw scores before any is replaced
          const T inv = T(1) / sum;
          detail::team_for<Exec>(team, lo, i + 1, [&](const std::int64_t j) {
            probs(b, h, i, j) = kx::exp(scale * T(scores(b, h, i, j)) - xmax) * inv;
          });
          detail::team_for<Exec>(team, 0, lo, [&](const std::int64_t j) { probs(b, h, i, j) = 0; });
          detail::team_for<Exec>(team, i + 1, S, [&](const std::int64_t j) { probs(b, h, i, j) = 0; });
        } else {
          // The exps into probs while they are summed (detail::team_sum: host compilers
          // vectorise the exp, and the sum keeps its order), then the normalisation and the
          // masked zeros in loops of their own: no select in a loop that computes an exp. In place on probs' row through one pointer: with two (the same row
          // when in place) GCC's run-time overlap check picks the scalar loop. Out of place
          // (recompute = none), the raw scores are copied over first.
          auto* const prow = &probs(b, h, i, 0);
          if (!in_place) {
            detail::team_for<Exec>(team, lo, i + 1, [&](const std::int64_t j) { prow[j] = scores(b, h, i, j); });
            team.team_barrier();
          }
          sum = detail::team_sum<Exec, T>(team, lo, i + 1, [&](const std::int64_t j) {
            const T e = kx::exp(scale * T(prow[j]) - xmax);
            prow[j] = e;
            return e;
          });
          team.team_barrier();
          const T inv = T(1) / sum;  // sum >= 1: the max entry contributes exp(0) = 1
          detail::team_for<Exec>(team, lo, i + 1, [&](const std::int64_t j) { probs(b, h, i, j) *= inv; });
          detail::team_for<Exec>(team, 0, lo, [&](const std::int64_t j) { probs(b, h, i, j) = 0; });
          detail::team_for<Exec>(team, i + 1, S, [&](const std::int64_t j) { probs(b, h, i, j) = 0; });
        }
        Kokkos::single(Kokkos::PerTeam(team), [&]() { lse(r) = xmax + kx::log(sum); });
      });
}

// In place on scores: they become the probabilities.
template <class Exec, class PV, class LV>
void causal_softmax_forward(const Exec& exec, const PV& scores, const LV& lse,
                            const kx::acc_t<typename PV::non_const_value_type> scale,
                            const std::int32_t* doc = nullptr) {
  causal_softmax_forward(exec, scores, scores, lse, scale, doc);
}

// In place on scores [B, nh, S, S] = Q Kᵀ (unscaled), with lse from causal_softmax_forward:
// P_ij = exp(scale S_ij - lse_i) for j <= i, 0 otherwise (the forward probabilities, to
// rounding).
template <class Exec, class PV, class LV>
void causal_softmax_recompute(const Exec& exec, const PV& scores, const LV& lse,
                              const kx::acc_t<typename PV::non_const_value_type> scale,
                              const std::int32_t* doc = nullptr) {
  detail::check_view<Exec, PV, 4>();
  detail::check_view<Exec, LV, 1>();
  detail::check_writable<PV>();
  detail::check_scores(scores, "causal_softmax_recompute");
  const std::int64_t nh = scores.extent(1), S = scores.extent(2);
  const std::int64_t rows = static_cast<std::int64_t>(scores.extent(0)) * nh * S;
  detail::require(lse.extent(0) == static_cast<std::size_t>(rows), "causal_softmax_recompute",
                  "lse must be [B*nh*S]");
  using T = kx::acc_t<typename PV::non_const_value_type>;
  using member = typename detail::Teams<Exec>::member_type;
  const auto policy = detail::teams(exec, rows, "causal_softmax_recompute");
  Kokkos::parallel_for(
      "tptrain::kernels::causal_softmax_recompute", policy, KOKKOS_LAMBDA(const member& team) {
        const std::int64_t r = team.league_rank();
        const detail::AttentionRow row = detail::attention_row(r, S, nh);
        const std::int64_t b = row.b, h = row.h, i = row.i, lo = doc ? std::int64_t(doc[b * S + i]) : 0;
        const T l = lse(r);
        // Loops of their own, not a select: a loop that computes its exp under a condition is not
        // vectorised on the host (detail::team_for).
        detail::team_for<Exec>(team, lo, i + 1, [&](const std::int64_t j) {
          scores(b, h, i, j) = kx::exp(scale * T(scores(b, h, i, j)) - l);
        });
        detail::team_for<Exec>(team, 0, lo, [&](const std::int64_t j) { scores(b, h, i, j) = 0; });
        detail::team_for<Exec>(team, i + 1, S, [&](const std::int64_t j) { scores(b, h, i, j) = 0; });
      });
}

// Softmax backward of query rows [r0, r1), in place on a row-tile buffer dprobs_tile
// [B, nh, >= r1 - r0, S] whose row i - r0 holds query i: dP in, dS out, with
//   dS_ij = scale · P_ij (dP_ij - Σ_{doc_i<=l<=i} P_il dP_il)   for doc_i <= j <= i, 0 for the
//   other j < r1,
// the gradient wrt the unscaled scores Q Kᵀ (scale folded in, so dQ = dS K and dK = dSᵀ Q).
// P comes from probs [B, nh, S, S] (rows r0..r1-1). Only the columns j < r1 of each tile row
// are read (j <= i) or written; columns r1.. and tile rows r1 - r0.. are left alone.
template <class Exec, class PV, class DPV>
void causal_softmax_backward_rows(const Exec& exec, const PV& probs, const DPV& dprobs_tile,
                                  const std::int64_t r0, const std::int64_t r1,
                                  const kx::acc_t<typename DPV::non_const_value_type> scale,
                                  const std::int32_t* doc = nullptr) {
  detail::check_view<Exec, PV, 4>();
  detail::check_view<Exec, DPV, 4>();
  detail::check_writable<DPV>();
  const char* kernel = "causal_softmax_backward";
  detail::check_scores(probs, kernel);
  const std::int64_t nh = probs.extent(1), S = probs.extent(2);
  detail::require(0 <= r0 && r0 <= r1 && r1 <= S, kernel, "need 0 <= r0 <= r1 <= S");
  const std::int64_t n = r1 - r0;
  detail::require(dprobs_tile.extent(0) == probs.extent(0) &&
                      dprobs_tile.extent(1) == probs.extent(1) &&
                      dprobs_tile.extent(2) >= static_cast<std::size_t>(n) &&
                      dprobs_tile.extent(3) == probs.extent(3),
                  kernel, "dprobs must be [B, nh, >= r1 - r0, S] for probs [B, nh, S, S]");
  const std::int64_t rows = static_cast<std::int64_t>(probs.extent(0)) * nh * n;
  if (rows == 0) return;
  using DT = typename DPV::non_const_value_type;
  using PT = typename PV::non_const_value_type;
  using T = kx::acc_t<DT>;
  using member = typename detail::Teams<Exec>::member_type;
  // P and dP of the row (j <= i < r1) stay in team scratch between the dot product and the
  // output pass when they fit: each is read from global memory once instead of twice. (The
  // scratch copies keep the storage types: they hold stored values, nothing is rounded there.)
  const std::size_t bytes =
      detail::scratch_row_bytes<Exec, PT>(r1) + detail::scratch_row_bytes<Exec, DT>(r1);
  // Compile-time false on host backends: their loops carry no scratch branch at all.
  constexpr bool can_cache = detail::scratch_rows<Exec>();
  const auto row_teams = detail::row_teams(exec, rows, bytes, kernel);
  const bool fits = row_teams.cached;
  Kokkos::parallel_for(
      "tptrain::kernels::causal_softmax_backward", row_teams.policy, KOKKOS_LAMBDA(const member& team) {
        const bool cached = can_cache && fits;
        // League rank (b*nh + h)*n + t: tile row t is query i = r0 + t.
        const detail::AttentionRow row = detail::attention_row(team.league_rank(), n, nh);
        const std::int64_t b = row.b, h = row.h, t = row.i, i = r0 + t, lo = doc ? std::int64_t(doc[b * S + i]) : 0;
        const detail::ScratchRow<Exec, PT> pbuf =
            cached ? detail::ScratchRow<Exec, PT>(team.team_scratch(0), r1)
                   : detail::ScratchRow<Exec, PT>();
        const detail::ScratchRow<Exec, DT> dpbuf =
            cached ? detail::ScratchRow<Exec, DT>(team.team_scratch(0), r1)
                   : detail::ScratchRow<Exec, DT>();
        T dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, lo, i + 1),
            [&](const std::int64_t j, T& acc) {
              const PT p = probs(b, h, i, j);
              const DT dp = dprobs_tile(b, h, t, j);
              if (cached) {
                pbuf(j) = p;
                dpbuf(j) = dp;
              }
              acc += p * dp;  // (16-bit: a float product)
            },
            dot);
        team.team_barrier();  // every read of dP is done before it is replaced
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, r1), [&](const std::int64_t j) {
          if (j > i || j < lo) {
            dprobs_tile(b, h, t, j) = T(0);
          } else if (cached) {
            dprobs_tile(b, h, t, j) = scale * pbuf(j) * (dpbuf(j) - dot);
          } else {
            dprobs_tile(b, h, t, j) = scale * probs(b, h, i, j) * (dprobs_tile(b, h, t, j) - dot);
          }
        });
      });
}

// Softmax backward of every row, in place on dprobs [B, nh, S, S] (dP in, dS out, as above;
// every entry is written, the masked ones 0).
template <class Exec, class PV, class DPV>
void causal_softmax_backward(const Exec& exec, const PV& probs, const DPV& dprobs,
                             const kx::acc_t<typename DPV::non_const_value_type> scale,
                             const std::int32_t* doc = nullptr) {
  detail::check_view<Exec, PV, 4>();
  detail::check_view<Exec, DPV, 4>();
  detail::check_scores(probs, "causal_softmax_backward");
  for (int r = 0; r < 4; ++r)
    detail::require(dprobs.extent(r) == probs.extent(r), "causal_softmax_backward",
                    "dprobs must have the shape of probs");
  causal_softmax_backward_rows(exec, probs, dprobs, 0, static_cast<std::int64_t>(probs.extent(2)),
                               scale, doc);
}

}  // namespace tptrain::kernels
