// Whole-view reductions for gradient clipping and NaN/Inf checks. Both return to the host (they
// wait for the kernel). Views: rank 1 or 2, any layout, managed or unmanaged, subviews.
//   squared_norm(exec, v) → double  Σ v², accumulated in double
//   all_finite(exec, v)   → bool    no NaN / ±Inf
#pragma once

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

namespace detail {

template <class Exec, class V>
double squared_norm_1d(const Exec& exec, const V& v) {
  double result = 0;
  Kokkos::parallel_reduce(
      "tptrain::kernels::squared_norm", range(exec, v.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i, double& acc) {
        const double x = static_cast<double>(v(i));
        acc += x * x;
      },
      result);
  return result;
}
template <class Exec, class V>
double squared_norm_2d(const Exec& exec, const V& v) {
  double result = 0;
  Kokkos::parallel_reduce(
      "tptrain::kernels::squared_norm", range2d(exec, v.extent(0), v.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j, double& acc) {
        const double x = static_cast<double>(v(i, j));
        acc += x * x;
      },
      result);
  return result;
}

template <class Exec, class V>
std::int64_t count_nonfinite_1d(const Exec& exec, const V& v) {
  std::int64_t result = 0;
  Kokkos::parallel_reduce(
      "tptrain::kernels::all_finite", range(exec, v.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& acc) {
        if (!kx::isfinite(v(i))) ++acc;
      },
      result);
  return result;
}
template <class Exec, class V>
std::int64_t count_nonfinite_2d(const Exec& exec, const V& v) {
  std::int64_t result = 0;
  Kokkos::parallel_reduce(
      "tptrain::kernels::all_finite", range2d(exec, v.extent(0), v.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j, std::int64_t& acc) {
        if (!kx::isfinite(v(i, j))) ++acc;
      },
      result);
  return result;
}

}  // namespace detail

template <class Exec, class V>
double squared_norm(const Exec& exec, const V& v) {  // v: [n] or [n0, n1]
  constexpr int rank = static_cast<int>(V::rank);
  static_assert(rank == 1 || rank == 2, "tptrain::kernels::squared_norm: rank-1 or rank-2 view");
  detail::check_view<Exec, V, rank>();
  if constexpr (rank == 1) {
    return detail::squared_norm_1d(exec, v);
  } else {
    return detail::squared_norm_2d(exec, v);
  }
}

template <class Exec, class V>
bool all_finite(const Exec& exec, const V& v) {  // v: [n] or [n0, n1]
  constexpr int rank = static_cast<int>(V::rank);
  static_assert(rank == 1 || rank == 2, "tptrain::kernels::all_finite: rank-1 or rank-2 view");
  detail::check_view<Exec, V, rank>();
  if constexpr (rank == 1) {
    return detail::count_nonfinite_1d(exec, v) == 0;
  } else {
    return detail::count_nonfinite_2d(exec, v) == 0;
  }
}

}  // namespace tptrain::kernels
