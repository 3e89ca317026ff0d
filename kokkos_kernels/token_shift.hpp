// The shifts of multi-token prediction (DeepSeek-V3 §2.2; src/model/multi_token_prediction.hpp)
// within each sequence of a micro-batch of [B·S] rows (row b·S + i is token i of sequence b):
//   shift_tokens   out(b·S + i) = in(b·S + i + k) for i + k < S, else `fill` (the targets k
//                  further ahead; fill −1 marks a row without one)
//   roll_rows      y(b·S + i, :) = x(b·S + (i + k) mod S, :): the embeddings of the tokens k
//                  ahead (rows past the window wrap around, and their losses are ignored); k < 0
//                  rolls back (the gradient's way)
//   zero_ignored   rows of v whose target is negative set to zero: a masked row's loss, or its
//                  logits' gradient
// Views: any layout; tokens int32.
#pragma once

#include <cstdint>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/views.hpp"

namespace tptrain::kernels {

template <class Exec, class IV, class OV>
void shift_tokens(const Exec& exec, const IV& in, const OV& out, const std::int64_t S, const std::int64_t k,
                  const int fill) {
  detail::check_view<Exec, IV, 1>();
  detail::check_view<Exec, OV, 1>();
  detail::check_writable<OV>();
  detail::require(S > 0 && in.extent(0) == out.extent(0) && std::int64_t(in.extent(0)) % S == 0 && k >= 0,
                  "shift_tokens", "in and out must be [B*S] and k >= 0");
  Kokkos::parallel_for(
      "tptrain::kernels::shift_tokens", detail::range(exec, in.extent(0)), KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t i = r % S;
        out(r) = i + k < S ? in(r + k) : fill;
      });
}

template <class Exec, class XV, class YV>
void roll_rows(const Exec& exec, const XV& x, const YV& y, const std::int64_t S, const std::int64_t k) {
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, YV, 2>();
  detail::check_writable<YV>();
  detail::require(S > 0 && x.extent(0) == y.extent(0) && x.extent(1) == y.extent(1) &&
                      std::int64_t(x.extent(0)) % S == 0,
                  "roll_rows", "x and y must be [B*S, H]");
  using V = typename YV::non_const_value_type;
  const std::int64_t shift = ((k % S) + S) % S;
  Kokkos::parallel_for(
      "tptrain::kernels::roll_rows", detail::range2d(exec, x.extent(0), x.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t r, const std::int64_t c) {
        const std::int64_t i = r % S;
        y(r, c) = V(x(r - i + (i + shift) % S, c));
      });
}

template <class Exec, class TV, class V>
void zero_ignored(const Exec& exec, const TV& targets, const V& v) {
  detail::check_view<Exec, TV, 1>();
  constexpr int rank = static_cast<int>(V::rank);  // an enum in Kokkos 3.4, an integral_constant in 4.x
  detail::check_view<Exec, V, rank>();
  detail::check_writable<V>();
  detail::require(targets.extent(0) == v.extent(0), "zero_ignored", "one target per row");
  using E = typename V::non_const_value_type;
  if constexpr (rank == 1) {
    Kokkos::parallel_for(
        "tptrain::kernels::zero_ignored", detail::range(exec, v.extent(0)), KOKKOS_LAMBDA(const std::int64_t r) {
          if (targets(r) < 0) v(r) = E(0);
        });
  } else {
    Kokkos::parallel_for(
        "tptrain::kernels::zero_ignored", detail::range2d(exec, v.extent(0), v.extent(1)),
        KOKKOS_LAMBDA(const std::int64_t r, const std::int64_t c) {
          if (targets(r) < 0) v(r, c) = E(0);
        });
  }
}

}  // namespace tptrain::kernels
