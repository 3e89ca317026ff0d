// GELU, tanh approximation (GPT-2 "gelu_new"):
//   y = 0.5 x (1 + tanh(k (x + 0.044715 x³))),  k = sqrt(2/π)
// Views: rank 2, any layout, managed or unmanaged, subviews.
#pragma once

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

namespace detail {
constexpr double gelu_k = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double gelu_c = 0.044715;
}  // namespace detail

// y = gelu(x) (y overwritten; y may alias x).
template <class Exec, class XV, class YV>
void gelu_forward(const Exec& exec,
                  const XV& x,    // [N, F]
                  const YV& y) {  // [N, F]
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, YV, 2>();
  detail::check_writable<YV>();
  detail::require(x.extent(0) == y.extent(0) && x.extent(1) == y.extent(1), "gelu_forward",
                  "x and y must have the same extents");
  using T = typename YV::non_const_value_type;
  const T k = static_cast<T>(detail::gelu_k);
  const T c = static_cast<T>(detail::gelu_c);
  Kokkos::parallel_for(
      "tptrain::kernels::gelu_forward", detail::range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        const T v = x(i, j);
        const T th = kx::tanh(k * (v + c * v * v * v));
        y(i, j) = T(0.5) * v * (T(1) + th);
      });
}

// dx = dy * gelu'(x) (dx overwritten; dx may alias dy).
//   gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t²) k (1 + 3 c x²),  t = tanh(k (x + c x³))
template <class Exec, class DYV, class XV, class DXV>
void gelu_backward(const Exec& exec,
                   const DYV& dy,    // [N, F]
                   const XV& x,      // [N, F] forward input
                   const DXV& dx) {  // [N, F]
  detail::check_view<Exec, DYV, 2>();
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, DXV, 2>();
  detail::check_writable<DXV>();
  detail::require(x.extent(0) == dy.extent(0) && x.extent(1) == dy.extent(1) &&
                      x.extent(0) == dx.extent(0) && x.extent(1) == dx.extent(1),
                  "gelu_backward", "dy, x and dx must have the same extents");
  using T = typename DXV::non_const_value_type;
  const T k = static_cast<T>(detail::gelu_k);
  const T c = static_cast<T>(detail::gelu_c);
  Kokkos::parallel_for(
      "tptrain::kernels::gelu_backward", detail::range2d(exec, dx.extent(0), dx.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        const T v = x(i, j);
        const T th = kx::tanh(k * (v + c * v * v * v));
        const T grad =
            T(0.5) * (T(1) + th) + T(0.5) * v * (T(1) - th * th) * k * (T(1) + T(3) * c * v * v);
        dx(i, j) = dy(i, j) * grad;
      });
}

}  // namespace tptrain::kernels
