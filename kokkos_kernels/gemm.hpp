// Linear-layer GEMMs (y = x Wᵀ and its two gradients) through kx::gemm → KokkosBlas::gemm,
// which hands LayoutRight float/double views to the BLAS TPL (OpenBLAS) on the host and to
// cuBLAS on CUDA. Never a hand-written loop.
//
// Views: rank-2, accessible from Exec; managed, unmanaged or subviews; every extent and stride
// at most 2^31 - 1 (BLAS counts in int; std::length_error otherwise). The vendor-BLAS fast path
// needs all three views LayoutRight (whole views, unmanaged views over contiguous memory, or
// row-range subviews `subview(x, pair, ALL)`); other layouts (LayoutStride column blocks) still
// give correct results through Kokkos Kernels' own, much slower, kernel.
#pragma once

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/elementwise.hpp"

namespace tptrain::kernels {

// y = x · Wᵀ (y overwritten).
template <class Exec, class XV, class WV, class YV>
void linear_forward(const Exec& exec,
                    const XV& x,    // [N, in]
                    const WV& W,    // [out, in]
                    const YV& y) {  // [N, out]
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, WV, 2>();
  detail::check_view<Exec, YV, 2>();
  detail::check_writable<YV>();
  detail::require(
      x.extent(0) == y.extent(0) && W.extent(1) == x.extent(1) && W.extent(0) == y.extent(1),
      "linear_forward", "shapes must be x[N,in], W[out,in], y[N,out]");
  detail::require_blas_dims(x, "linear_forward", "x");
  detail::require_blas_dims(W, "linear_forward", "W");
  detail::require_blas_dims(y, "linear_forward", "y");
  using T = typename YV::non_const_value_type;
  if (x.extent(1) == 0) {  // KokkosBlas::gemm returns early on an empty inner dimension
    fill(exec, y, T(0));
    return;
  }
  kx::gemm(exec, "N", "T", T(1), x, W, T(0), y);
}

// dx = dy · W (dx overwritten).
template <class Exec, class DYV, class WV, class DXV>
void linear_backward_input(const Exec& exec,
                           const DYV& dy,    // [N, out]
                           const WV& W,      // [out, in]
                           const DXV& dx) {  // [N, in]
  detail::check_view<Exec, DYV, 2>();
  detail::check_view<Exec, WV, 2>();
  detail::check_view<Exec, DXV, 2>();
  detail::check_writable<DXV>();
  detail::require(
      dy.extent(0) == dx.extent(0) && W.extent(0) == dy.extent(1) && W.extent(1) == dx.extent(1),
      "linear_backward_input", "shapes must be dy[N,out], W[out,in], dx[N,in]");
  detail::require_blas_dims(dy, "linear_backward_input", "dy");
  detail::require_blas_dims(W, "linear_backward_input", "W");
  detail::require_blas_dims(dx, "linear_backward_input", "dx");
  using T = typename DXV::non_const_value_type;
  if (dy.extent(1) == 0) {
    fill(exec, dx, T(0));
    return;
  }
  kx::gemm(exec, "N", "N", T(1), dy, W, T(0), dx);
}

// dW += dyᵀ · x (accumulates, so micro-batches add up).
template <class Exec, class DYV, class XV, class DWV>
void linear_backward_weight(const Exec& exec,
                            const DYV& dy,    // [N, out]
                            const XV& x,      // [N, in]
                            const DWV& dW) {  // [out, in]
  detail::check_view<Exec, DYV, 2>();
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, DWV, 2>();
  detail::check_writable<DWV>();
  detail::require(
      dy.extent(0) == x.extent(0) && dW.extent(0) == dy.extent(1) && dW.extent(1) == x.extent(1),
      "linear_backward_weight", "shapes must be dy[N,out], x[N,in], dW[out,in]");
  detail::require_blas_dims(dy, "linear_backward_weight", "dy");
  detail::require_blas_dims(x, "linear_backward_weight", "x");
  detail::require_blas_dims(dW, "linear_backward_weight", "dW");
  using T = typename DWV::non_const_value_type;
  kx::gemm(exec, "T", "N", T(1), dy, x, T(1), dW);  // N == 0: nothing to add, gemm returns
}

}  // namespace tptrain::kernels
