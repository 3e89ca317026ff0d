// Linear-layer GEMMs (y = x Wᵀ and its two gradients) through kx::gemm → KokkosBlas::gemm,
// which hands LayoutRight float/double views to the BLAS TPL (OpenBLAS) on the host and to
// cuBLAS on CUDA. Never a hand-written loop where a vendor BLAS exists.
//
// Views: rank-2, accessible from Exec; managed, unmanaged or subviews; every extent and stride
// at most 2^31 - 1 (BLAS counts in int; std::length_error otherwise). The vendor-BLAS fast path
// needs all three views LayoutRight (whole views, unmanaged views over contiguous memory, or
// row-range subviews `subview(x, pair, ALL)`); other layouts (LayoutStride column blocks) still
// give correct results through Kokkos Kernels' own, much slower, kernel.
//
// Mixed precision: x, W, dy may hold kx::bf16 or kx::fp16 (all three one type); y and dx then
// hold that type and dW that type or float (the fp32 weight gradient). These GEMMs multiply and
// sum in fp32 and round the output once: they go through batched_gemm (batch 1), which calls
// cublasGemmEx on CUDA, an sgemm on fp32 copies on the host and a Kokkos kernel elsewhere
// (batched_gemm.hpp). 16-bit views must have unit stride along their last index (LayoutRight
// views and their row-range or column-block subviews; std::invalid_argument otherwise).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "kokkos_kernels/batched_gemm.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "kokkos_kernels/precision.hpp"

namespace tptrain::kernels {

namespace detail {

// Leading dimension of a rank-2 view whose last index has unit stride (a one-row view may
// report any stride(0): then the row length does).
template <class V>
std::int64_t row_major_ld(const V& v, const char* kernel, const char* name) {
  require(v.stride(1) == 1 || v.extent(1) <= 1, kernel,
          (std::string(name) + ": 16-bit GEMM operands need unit stride along the last index")
              .c_str());
  const std::int64_t cols = v.extent(1) > 1 ? static_cast<std::int64_t>(v.extent(1)) : 1;
  const std::int64_t ld = static_cast<std::int64_t>(v.stride(0));
  return v.extent(0) <= 1 || ld < cols ? (ld > cols ? ld : cols) : ld;
}

// C = alpha op(A) op(B) + beta C as one batched_gemm (batch 1) on data() and leading
// dimensions: 16-bit A and B (C 16-bit or float), and views Kokkos Kernels would not hand to the
// vendor BLAS (a column block of a wider buffer: LayoutStride with unit last stride).
template <class Exec, class AV, class BV, class CV>
void gemm_16bit(const Exec& exec, const char transA, const char transB,
                const kx::acc_t<typename AV::non_const_value_type> alpha, const AV& A, const BV& B,
                const kx::acc_t<typename AV::non_const_value_type> beta, const CV& C, const char* kernel) {
  using T = typename AV::non_const_value_type;
  static_assert(std::is_same<typename BV::non_const_value_type, T>::value,
                "tptrain::kernels: 16-bit GEMM operands hold one type");
  const std::int64_t M = C.extent(0), N = C.extent(1);
  const std::int64_t K = transA == 'N' ? A.extent(1) : A.extent(0);
  if (M == 0 || N == 0) return;
  batched_gemm<Exec, T>(exec, transA, transB, M, N, K, alpha, A.data(),
                        row_major_ld(A, kernel, "A"), 0, B.data(), row_major_ld(B, kernel, "B"),
                        0, beta, C.data(), row_major_ld(C, kernel, "C"), 0, 1);
}

template <class... V>
constexpr bool layout_right() {
  return (std::is_same<typename V::array_layout, Kokkos::LayoutRight>::value && ...);
}

}  // namespace detail

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
  if constexpr (kx::is_half_v<typename XV::non_const_value_type> || !detail::layout_right<XV, WV, YV>()) {
    // (x or y a column block: multi-head latent attention's latent, its packed Q block)
    detail::gemm_16bit(exec, 'N', 'T', kx::acc_t<T>(1), x, W, kx::acc_t<T>(0), y, "linear_forward");
  } else {
    kx::gemm(exec, "N", "T", T(1), x, W, T(0), y);
  }
}

// dx = dy · W (dx overwritten), or dx += dy · W (accumulate: a second path into the same input).
template <class Exec, class DYV, class WV, class DXV>
void linear_backward_input(const Exec& exec,
                           const DYV& dy,    // [N, out]
                           const WV& W,      // [out, in]
                           const DXV& dx,    // [N, in]
                           const bool accumulate = false) {
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
    if (!accumulate) fill(exec, dx, T(0));
    return;
  }
  const kx::acc_t<T> beta(accumulate ? 1 : 0);
  if constexpr (kx::is_half_v<typename DYV::non_const_value_type> || !detail::layout_right<DYV, WV, DXV>()) {
    // (dx a column block: the model's context gradient, written into d_qkv's Q block)
    detail::gemm_16bit(exec, 'N', 'N', kx::acc_t<T>(1), dy, W, beta, dx, "linear_backward_input");
  } else {
    kx::gemm(exec, "N", "N", T(1), dy, W, T(beta), dx);
  }
}

// dW += dyᵀ · x (accumulates, so micro-batches add up). 16-bit dy and x: dW float or 16-bit.
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
  if constexpr (kx::is_half_v<typename DYV::non_const_value_type> || !detail::layout_right<DYV, XV, DWV>()) {
    // dW float (or 16-bit): fp32 sums added to it once. (dy or x a column block: MLA's.)
    detail::gemm_16bit(exec, 'T', 'N', kx::acc_t<T>(1), dy, x, kx::acc_t<T>(1), dW, "linear_backward_weight");
  } else {
    kx::gemm(exec, "T", "N", T(1), dy, x, T(1), dW);  // N == 0: nothing to add, gemm returns
  }
}

}  // namespace tptrain::kernels
