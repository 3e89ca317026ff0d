// Bias of a Linear layer: y += b per row; db += column sums of dy.
// Views: any layout, managed or unmanaged, subviews.
#pragma once

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

// y(t, j) += b(j)
template <class Exec, class YV, class BV>
void bias_add(const Exec& exec,
              const YV& y,    // [N, out]
              const BV& b) {  // [out]
  detail::check_view<Exec, YV, 2>();
  detail::check_view<Exec, BV, 1>();
  detail::check_writable<YV>();
  detail::require(b.extent(0) == y.extent(1), "bias_add", "b must have y.extent(1) entries");
  Kokkos::parallel_for(
      "tptrain::kernels::bias_add", detail::range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t t, const std::int64_t j) { y(t, j) += b(j); });
}

// db(j) += sum_t dy(t, j). Deterministic: each column is summed over the rows in order by one
// thread, then added to db once (no atomics, bitwise reproducible). CB: see detail::ColumnBlock.
template <class Exec, class DYV, class DBV, int CB = detail::ColumnBlock<Exec>::value>
void bias_backward(const Exec& exec,
                   const DYV& dy,    // [N, out]
                   const DBV& db) {  // [out]
  detail::check_view<Exec, DYV, 2>();
  detail::check_view<Exec, DBV, 1>();
  detail::check_writable<DBV>();
  static_assert(CB >= 1, "column block must be positive");
  detail::require(db.extent(0) == dy.extent(1), "bias_backward",
                  "db must have dy.extent(1) entries");
  using T = typename DBV::non_const_value_type;
  const std::int64_t n = dy.extent(0);
  const std::int64_t cols = dy.extent(1);
  Kokkos::parallel_for(
      "tptrain::kernels::bias_backward", detail::range(exec, detail::ceil_div(cols, CB)),
      KOKKOS_LAMBDA(const std::int64_t blk) {
        const std::int64_t j0 = blk * CB;
        const int nj = static_cast<int>(kx::min<std::int64_t>(CB, cols - j0));
        T sum[CB];
        for (int c = 0; c < CB; ++c) sum[c] = 0;
        for (std::int64_t t = 0; t < n; ++t)
          for (int c = 0; c < nj; ++c) sum[c] += dy(t, j0 + c);
        for (int c = 0; c < nj; ++c) db(j0 + c) += sum[c];
      });
}

}  // namespace tptrain::kernels
