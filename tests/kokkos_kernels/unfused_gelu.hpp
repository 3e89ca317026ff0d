// GELU as two plain kernels, σ recomputed from x in the backward: the reference the fused kernels
// of kokkos_kernels/gelu.hpp (bias_gelu_forward, gelu_from_sigmoid, gelu_backward_from_sigmoid)
// must equal bit for bit.
#pragma once

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/gelu.hpp"

namespace tptrain::kernels::test {

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
  using T = kx::acc_t<typename YV::non_const_value_type>;
  const T k = static_cast<T>(detail::gelu_k);
  const T c = static_cast<T>(detail::gelu_c);
  Kokkos::parallel_for(
      "tptrain::kernels::gelu_forward", detail::range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        const T v = x(i, j);
        y(i, j) = v * detail::gelu_sigmoid(v, k, c);
      });
}

// dx = dy * gelu'(x) (dx overwritten; dx may alias dy).
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
  using T = kx::acc_t<typename DXV::non_const_value_type>;
  const T k = static_cast<T>(detail::gelu_k);
  const T c = static_cast<T>(detail::gelu_c);
  Kokkos::parallel_for(
      "tptrain::kernels::gelu_backward", detail::range2d(exec, dx.extent(0), dx.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        const T v = x(i, j);
        dx(i, j) = dy(i, j) * detail::gelu_grad(v, detail::gelu_sigmoid(v, k, c), k, c);
      });
}

}  // namespace tptrain::kernels::test
