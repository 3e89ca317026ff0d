// Pieces of Megatron's VocabParallelCrossEntropy on local logits [N, Vl]. A rank holds the
// logits of vocabulary ids [vocab_start, vocab_start + Vl); only the first valid_cols columns are
// real vocabulary (the rest is padding, GptShape::padded_vocab, and is ignored). The caller
// assembles the pieces across the tensor-parallel group:
//   row_max          → all-reduce MAX  → rowmax (global)
//   row_sum_exp      → all-reduce SUM  → sumexp (global)
//   target_logit     → all-reduce SUM  → tl     (exactly one rank holds each target)
//   cross_entropy_loss(rowmax, sumexp, tl) = log Σ_v exp(z_v) - z_target
//   cross_entropy_backward: dlogits = scale · (softmax - onehot), padding columns 0
// valid_cols may be 0 (a rank holding only padding): row_max gives the lowest finite value and
// row_sum_exp gives 0, both neutral in the all-reduce.
// Precision: logits and dlogits may hold kx::bf16 / kx::fp16; rowmax, sumexp, tl and loss are
// meant to be float. Every max, exp, sum and difference is computed in acc_t of the output
// (float for 16-bit) from the logits as stored, and each output is rounded once.
// Views: any layout, managed or unmanaged, subviews.
#pragma once

#include <limits>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

// rowmax(i) = max_{j < valid_cols} logits(i, j); the lowest finite value of rowmax's type when
// valid_cols == 0.
template <class Exec, class LV, class MV>
void row_max(const Exec& exec,
             const LV& logits,  // [N, Vl]
             const std::int64_t valid_cols,
             const MV& rowmax) {  // [N] out (overwritten)
  detail::check_view<Exec, LV, 2>();
  detail::check_view<Exec, MV, 1>();
  detail::check_writable<MV>();
  detail::require(rowmax.extent(0) == logits.extent(0), "row_max", "rowmax must be [N]");
  detail::require(valid_cols >= 0 && static_cast<std::size_t>(valid_cols) <= logits.extent(1),
                  "row_max", "need 0 <= valid_cols <= logits.extent(1)");
  using MT = typename MV::non_const_value_type;
  using T = kx::acc_t<MT>;
  using member = typename detail::Teams<Exec>::member_type;
  const T lowest = kx::is_half_v<MT> ? T(-kx::max_finite<MT>()) : std::numeric_limits<T>::lowest();
  Kokkos::parallel_for(
      "tptrain::kernels::row_max", detail::teams(exec, logits.extent(0), "row_max"),
      KOKKOS_LAMBDA(const member& team) {
        const std::int64_t i = team.league_rank();
        T m = lowest;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, valid_cols),
            [&](const std::int64_t j, T& acc) {
              acc = kx::max(acc, kx::convert_to<T>(logits(i, j)));
            },
            Kokkos::Max<T>(m));
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rowmax(i) = valid_cols > 0 ? m : lowest; });
      });
}

// sumexp(i) = Σ_{j < valid_cols} exp(logits(i, j) - rowmax(i)), rowmax the GLOBAL row max.
template <class Exec, class LV, class MV, class SV>
void row_sum_exp(const Exec& exec,
                 const LV& logits,  // [N, Vl]
                 const MV& rowmax,  // [N] global row max
                 const std::int64_t valid_cols,
                 const SV& sumexp) {  // [N] out (overwritten)
  detail::check_view<Exec, LV, 2>();
  detail::check_view<Exec, MV, 1>();
  detail::check_view<Exec, SV, 1>();
  detail::check_writable<SV>();
  detail::require(rowmax.extent(0) == logits.extent(0) && sumexp.extent(0) == logits.extent(0),
                  "row_sum_exp", "rowmax and sumexp must be [N]");
  detail::require(valid_cols >= 0 && static_cast<std::size_t>(valid_cols) <= logits.extent(1),
                  "row_sum_exp", "need 0 <= valid_cols <= logits.extent(1)");
  using T = kx::acc_t<typename SV::non_const_value_type>;
  using member = typename detail::Teams<Exec>::member_type;
  Kokkos::parallel_for(
      "tptrain::kernels::row_sum_exp", detail::teams(exec, logits.extent(0), "row_sum_exp"),
      KOKKOS_LAMBDA(const member& team) {
        const std::int64_t i = team.league_rank();
        const T m = kx::convert_to<T>(rowmax(i));
        const T sum = detail::team_sum<Exec, T>(team, 0, valid_cols, [&](const std::int64_t j) {
          return kx::exp(kx::convert_to<T>(logits(i, j)) - m);
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { sumexp(i) = sum; });
      });
}

// tl(i) = logits(i, targets(i) - vocab_start) if the target is one of this rank's valid columns
// [vocab_start, vocab_start + valid_cols), else 0. valid_cols defaults to logits.extent(1):
// targets are real vocabulary ids, never padding, so the two ranges select the same targets.
template <class Exec, class LV, class TV, class OV>
void target_logit(const Exec& exec,
                  const LV& logits,   // [N, Vl]
                  const TV& targets,  // [N] target ids
                  const std::int64_t vocab_start,
                  const OV& tl,  // [N] out (overwritten)
                  std::int64_t valid_cols = -1) {
  detail::check_view<Exec, LV, 2>();
  detail::check_view<Exec, TV, 1>();
  detail::check_view<Exec, OV, 1>();
  detail::check_writable<OV>();
  detail::require(targets.extent(0) == logits.extent(0) && tl.extent(0) == logits.extent(0),
                  "target_logit", "targets and tl must be [N]");
  if (valid_cols < 0) valid_cols = logits.extent(1);
  detail::require(static_cast<std::size_t>(valid_cols) <= logits.extent(1), "target_logit",
                  "need valid_cols <= logits.extent(1)");
  using T = kx::acc_t<typename OV::non_const_value_type>;
  const std::int64_t vc = valid_cols;
  Kokkos::parallel_for(
      "tptrain::kernels::target_logit", detail::range(exec, logits.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t col = static_cast<std::int64_t>(targets(i)) - vocab_start;
        tl(i) = (col >= 0 && col < vc) ? kx::convert_to<T>(logits(i, col)) : T(0);
      });
}

// loss(i) = log(sumexp(i)) + rowmax(i) - tl(i), all three already reduced over the group.
template <class Exec, class MV, class SV, class TLV, class OV>
void cross_entropy_loss(const Exec& exec,
                        const MV& rowmax,  // [N] global
                        const SV& sumexp,  // [N] global
                        const TLV& tl,     // [N] global
                        const OV& loss) {  // [N] out (overwritten)
  detail::check_view<Exec, MV, 1>();
  detail::check_view<Exec, SV, 1>();
  detail::check_view<Exec, TLV, 1>();
  detail::check_view<Exec, OV, 1>();
  detail::check_writable<OV>();
  detail::require(rowmax.extent(0) == loss.extent(0) && sumexp.extent(0) == loss.extent(0) &&
                      tl.extent(0) == loss.extent(0),
                  "cross_entropy_loss", "all views must be [N]");
  using T = kx::acc_t<typename OV::non_const_value_type>;
  Kokkos::parallel_for(
      "tptrain::kernels::cross_entropy_loss", detail::range(exec, loss.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        loss(i) = kx::log(kx::convert_to<T>(sumexp(i))) + kx::convert_to<T>(rowmax(i)) -
                  kx::convert_to<T>(tl(i));
      });
}

// dlogits(i, j) = scale · (exp(logits(i, j) - rowmax(i)) / sumexp(i) - [vocab_start + j ==
// targets(i)]) for j < valid_cols, 0 for padding columns (overwritten). rowmax/sumexp global.
// scale is typically 1 / (number of tokens in the global batch) for a mean loss.
// dlogits may be logits itself (in place, as the loss head calls it) or a separate view.
template <class Exec, class LV, class MV, class SV, class TV, class DV>
void cross_entropy_backward(const Exec& exec,
                            const LV& logits,   // [N, Vl]
                            const MV& rowmax,   // [N] global
                            const SV& sumexp,   // [N] global
                            const TV& targets,  // [N] target ids
                            const std::int64_t vocab_start, const std::int64_t valid_cols,
                            const kx::acc_t<typename DV::non_const_value_type> scale,
                            const DV& dlogits) {  // [N, Vl] out (overwritten)
  detail::check_view<Exec, LV, 2>();
  detail::check_view<Exec, MV, 1>();
  detail::check_view<Exec, SV, 1>();
  detail::check_view<Exec, TV, 1>();
  detail::check_view<Exec, DV, 2>();
  detail::check_writable<DV>();
  const std::size_t n = logits.extent(0);
  detail::require(dlogits.extent(0) == n && dlogits.extent(1) == logits.extent(1) &&
                      rowmax.extent(0) == n && sumexp.extent(0) == n && targets.extent(0) == n,
                  "cross_entropy_backward",
                  "shapes must be logits,dlogits[N,Vl], rowmax,sumexp,targets[N]");
  detail::require(valid_cols >= 0 && static_cast<std::size_t>(valid_cols) <= logits.extent(1),
                  "cross_entropy_backward", "need 0 <= valid_cols <= logits.extent(1)");
  using T = kx::acc_t<typename DV::non_const_value_type>;
  using member = typename detail::Teams<Exec>::member_type;
  const std::int64_t cols = logits.extent(1);
  const bool in_place = static_cast<const void*>(dlogits.data()) == static_cast<const void*>(logits.data());
  // A team per row: the softmax of the valid columns in one loop without a select or a branch
  // (detail::team_for: vectorised on host backends, exp included), the padding zeros in another,
  // and the target's -1 afterwards, from its logit read before the row is overwritten.
  Kokkos::parallel_for(
      "tptrain::kernels::cross_entropy_backward", detail::teams(exec, n, "cross_entropy_backward"),
      KOKKOS_LAMBDA(const member& team) {
        const std::int64_t i = team.league_rank();
        const T m = kx::convert_to<T>(rowmax(i));
        const T s = kx::convert_to<T>(sumexp(i));
        const std::int64_t tcol = static_cast<std::int64_t>(targets(i)) - vocab_start;
        const bool mine = tcol >= 0 && tcol < valid_cols;
        const T tl = mine ? kx::convert_to<T>(logits(i, tcol)) : T(0);
        team.team_barrier();  // in place: every thread has read the target logit before any write
        auto* const drow = &dlogits(i, 0);
        if (in_place) {  // one pointer: GCC's overlap check would send two to the scalar loop
          detail::team_for<Exec>(team, 0, valid_cols, [&](const std::int64_t j) {
            drow[j] = kx::exp(kx::convert_to<T>(drow[j]) - m) / s * scale;
          });
        } else {
          detail::team_for<Exec>(team, 0, valid_cols, [&](const std::int64_t j) {
            drow[j] = kx::exp(kx::convert_to<T>(logits(i, j)) - m) / s * scale;
          });
        }
        detail::team_for<Exec>(team, valid_cols, cols, [&](const std::int64_t j) { drow[j] = T(0); });
        team.team_barrier();
        if (mine)
          Kokkos::single(Kokkos::PerTeam(team), [&]() { drow[tcol] = (kx::exp(tl - m) / s - T(1)) * scale; });
      });
}

}  // namespace tptrain::kernels
