// Bias of a Linear layer: y += b per row; db += column sums of dy.
// Views: any layout, managed or unmanaged, subviews.
#pragma once

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

// y(t, j) += b(j)
template <class Exec, class YV, class BV>
void bias_add(const Exec& exec,
              const YV& y,   // [N, out]
              const BV& b) { // [out]
  detail::check_view<Exec, YV, 2>();
  detail::check_view<Exec, BV, 1>();
  detail::check_writable<YV>();
  detail::require(b.extent(0) == y.extent(1), "bias_add", "b must have y.extent(1) entries");
  Kokkos::parallel_for(
      "tptrain::kernels::bias_add", detail::range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t t, const std::int64_t j) { y(t, j) += b(j); });
}

// db(j) += sum_t dy(t, j). Deterministic: one thread per column sums the rows in order, then
// adds the sum to db once (no atomics, bitwise reproducible).
template <class Exec, class DYV, class DBV>
void bias_backward(const Exec& exec,
                   const DYV& dy,   // [N, out]
                   const DBV& db) { // [out]
  detail::check_view<Exec, DYV, 2>();
  detail::check_view<Exec, DBV, 1>();
  detail::check_writable<DBV>();
  detail::require(db.extent(0) == dy.extent(1), "bias_backward",
                  "db must have dy.extent(1) entries");
  using T = typename DBV::non_const_value_type;
  const std::int64_t n = dy.extent(0);
  Kokkos::parallel_for(
      "tptrain::kernels::bias_backward", detail::range(exec, dy.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t j) {
        T sum = 0;
        for (std::int64_t t = 0; t < n; ++t) sum += dy(t, j);
        db(j) += sum;
      });
}

}  // namespace tptrain::kernels
