// Vocab-parallel token embedding and learned position embedding (Megatron
// VocabParallelEmbedding pieces). A rank holds wte rows for vocabulary ids
// [vocab_start, vocab_start + Vl); tokens outside that range give zero rows here, and the caller
// all-reduces y over the tensor-parallel group.
// Tokens are row t = b*S + s of the [N, H] activations, N = B*S.
// Backward kernels are deterministic (fixed summation order, no atomics).
// Views: any layout, managed or unmanaged, subviews.
#pragma once

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

// y(t, :) = wte(tok - vocab_start, :) if vocab_start <= tok < vocab_start + Vl, else 0
// (overwritten).
template <class Exec, class TV, class WV, class YV>
void embedding_forward_masked(const Exec& exec,
                              const TV& tokens,  // [N] token ids
                              const WV& wte,     // [Vl, H] local vocabulary rows
                              const std::int64_t vocab_start,
                              const YV& y) {  // [N, H] out (overwritten)
  detail::check_view<Exec, TV, 1>();
  detail::check_view<Exec, WV, 2>();
  detail::check_view<Exec, YV, 2>();
  detail::check_writable<YV>();
  detail::require(tokens.extent(0) == y.extent(0) && wte.extent(1) == y.extent(1),
                  "embedding_forward_masked", "shapes must be tokens[N], wte[Vl,H], y[N,H]");
  using T = typename YV::non_const_value_type;
  const std::int64_t vl = wte.extent(0);
  Kokkos::parallel_for(
      "tptrain::kernels::embedding_forward_masked", detail::range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t t, const std::int64_t h) {
        const std::int64_t row = static_cast<std::int64_t>(tokens(t)) - vocab_start;
        y(t, h) = (row >= 0 && row < vl) ? static_cast<T>(wte(row, h)) : T(0);
      });
}

// y(t, :) += wpe(t % S, :)
template <class Exec, class PV, class YV>
void position_embedding_add(const Exec& exec,
                            const PV& wpe,  // [S_max >= S, H] position rows
                            const std::int64_t S,
                            const YV& y) {  // [N = B*S, H] in/out
  detail::check_view<Exec, PV, 2>();
  detail::check_view<Exec, YV, 2>();
  detail::check_writable<YV>();
  detail::require(S > 0 && wpe.extent(0) >= static_cast<std::size_t>(S) &&
                      wpe.extent(1) == y.extent(1) &&
                      y.extent(0) % static_cast<std::size_t>(S) == 0,
                  "position_embedding_add", "shapes must be wpe[>=S,H], y[B*S,H]");
  Kokkos::parallel_for(
      "tptrain::kernels::position_embedding_add", detail::range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t t, const std::int64_t h) { y(t, h) += wpe(t % S, h); });
}

// dwte(tok - vocab_start, h) += dy(t, h) for the tokens in this rank's range (accumulated).
// One thread per column h (per block of CB columns, see detail::ColumnBlock) walks the tokens
// in order, so each (row, h) is touched by one thread in a fixed order: no atomics, bitwise
// reproducible, O(N*H) work.
template <class Exec, class TV, class DYV, class DWV, int CB = detail::ColumnBlock<Exec>::value>
void embedding_backward_masked(const Exec& exec,
                               const TV& tokens,  // [N] token ids
                               const DYV& dy,     // [N, H]
                               const std::int64_t vocab_start,
                               const DWV& dwte) {  // [Vl, H] accumulated
  detail::check_view<Exec, TV, 1>();
  detail::check_view<Exec, DYV, 2>();
  detail::check_view<Exec, DWV, 2>();
  detail::check_writable<DWV>();
  detail::require(tokens.extent(0) == dy.extent(0) && dwte.extent(1) == dy.extent(1),
                  "embedding_backward_masked", "shapes must be tokens[N], dy[N,H], dwte[Vl,H]");
  const std::int64_t n = dy.extent(0);
  const std::int64_t vl = dwte.extent(0);
  const std::int64_t cols = dy.extent(1);
  Kokkos::parallel_for(
      "tptrain::kernels::embedding_backward_masked",
      detail::range(exec, detail::ceil_div(cols, CB)), KOKKOS_LAMBDA(const std::int64_t blk) {
        const std::int64_t h0 = blk * CB;
        const int nh = static_cast<int>(kx::min<std::int64_t>(CB, cols - h0));
        for (std::int64_t t = 0; t < n; ++t) {
          const std::int64_t row = static_cast<std::int64_t>(tokens(t)) - vocab_start;
          if (row >= 0 && row < vl)
            for (int c = 0; c < nh; ++c) dwte(row, h0 + c) += dy(t, h0 + c);
        }
      });
}

// dwpe(s, h) += Σ_b dy(b*S + s, h), batches summed in order, then added once (accumulated).
template <class Exec, class DYV, class DPV>
void position_embedding_backward(const Exec& exec,
                                 const DYV& dy,  // [N = B*S, H]
                                 const std::int64_t S,
                                 const DPV& dwpe) {  // [S_max >= S, H] accumulated (rows < S)
  detail::check_view<Exec, DYV, 2>();
  detail::check_view<Exec, DPV, 2>();
  detail::check_writable<DPV>();
  detail::require(S > 0 && dwpe.extent(0) >= static_cast<std::size_t>(S) &&
                      dwpe.extent(1) == dy.extent(1) &&
                      dy.extent(0) % static_cast<std::size_t>(S) == 0,
                  "position_embedding_backward", "shapes must be dy[B*S,H], dwpe[>=S,H]");
  using T = typename DPV::non_const_value_type;
  const std::int64_t nb = dy.extent(0) / S;
  Kokkos::parallel_for(
      "tptrain::kernels::position_embedding_backward", detail::range2d(exec, S, dy.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t s, const std::int64_t h) {
        T sum = 0;
        for (std::int64_t b = 0; b < nb; ++b) sum += dy(b * S + s, h);
        dwpe(s, h) += sum;
      });
}

}  // namespace tptrain::kernels
