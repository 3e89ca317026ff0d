// GELU, tanh approximation (GPT-2 "gelu_new", PyTorch approximate="tanh"):
//   y = 0.5 x (1 + tanh(u)),  u = k (x + 0.044715 x³),  k = sqrt(2/π)
// evaluated through the identity 0.5 (1 + tanh(u)) = σ(2u) = 1 / (1 + exp(-2u)):
//   y = x σ(2u),  y' = σ(2u) (1 + 2 x (1 - σ(2u)) k (1 + 3·0.044715 x²))
// Same function; in float it avoids the cancellation in 1 + tanh(u) for negative x (the tanh form
// loses ~4e-5 relative at x = -3.5) and exp is cheaper than tanh on CPUs. exp(-2u) may overflow
// to +inf for very negative x: then σ = 0 and y = y' = 0, no NaN.
// Precision: every view may hold kx::bf16 / kx::fp16; σ and the products are computed in acc_t
// of the output (float for 16-bit) and each output is rounded once. A 16-bit sig loses σ's low
// bits for the backward (gelu'(x) then carries a 2^-9 relative error): keep sig in float when
// that matters.
// Views: rank 2, any layout, managed or unmanaged, subviews.
#pragma once

#include "kokkos_kernels/column_sums.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

namespace detail {
constexpr double gelu_k = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double gelu_c = 0.044715;

// σ(2u), u = k (v + c v³): gelu(v) = v · σ(2u).
template <class T>
KOKKOS_INLINE_FUNCTION T gelu_sigmoid(const T v, const T k, const T c) {
  return T(1) / (T(1) + kx::exp(T(-2) * k * (v + c * v * v * v)));
}
// gelu'(v) from s = σ(2u).
template <class T>
KOKKOS_INLINE_FUNCTION T gelu_grad(const T v, const T s, const T k, const T c) {
  return s * (T(1) + T(2) * v * (T(1) - s) * k * (T(1) + T(3) * c * v * v));
}
}  // namespace detail

// The MLP's bias and activation in one pass over [N, F] (instead of a bias add, then GELU),
// saving σ(2u) for the backward, so that the backward needs no exp (the dominant cost of GELU on
// CPUs) and the layer keeps h and σ instead of h and gelu(h):
//   h(i, j) += bias(j);  sig(i, j) = σ(2u(h));  a(i, j) = h · sig
// (bitwise the unfused GELU of tests/kokkos_kernels/unfused_gelu.hpp).
// a and sig must not alias h or each other.
template <class Exec, class HV, class BV, class AV, class SV>
void bias_gelu_forward(const Exec& exec,
                       const HV& h,     // [N, F] in/out
                       const BV& bias,  // [F]
                       const AV& a,     // [N, F] out
                       const SV& sig) { // [N, F] out, for gelu_from_sigmoid / gelu_backward_from_sigmoid
  detail::check_view<Exec, SV, 2>();
  detail::check_writable<SV>();
  detail::require(sig.extent(0) == h.extent(0) && sig.extent(1) == h.extent(1), "bias_gelu_forward",
                  "sig must have the extents of h");
  detail::check_view<Exec, HV, 2>();
  detail::check_view<Exec, BV, 1>();
  detail::check_view<Exec, AV, 2>();
  detail::check_writable<HV>();
  detail::check_writable<AV>();
  detail::require(h.extent(0) == a.extent(0) && h.extent(1) == a.extent(1) &&
                      bias.extent(0) == h.extent(1),
                  "bias_gelu_forward", "shapes must be h[N,F], bias[F], a[N,F]");
  using HT = typename HV::non_const_value_type;
  using T = kx::acc_t<typename AV::non_const_value_type>;
  // σ as a 16-bit sig stores it, so that a is bitwise gelu_from_sigmoid's; otherwise σ in T.
  using ST = std::conditional_t<kx::is_half_v<typename SV::non_const_value_type>,
                                typename SV::non_const_value_type, T>;
  const T k = static_cast<T>(detail::gelu_k);
  const T c = static_cast<T>(detail::gelu_c);
  Kokkos::parallel_for(
      "tptrain::kernels::bias_gelu_forward", detail::range2d(exec, h.extent(0), h.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        const HT hb = h(i, j) + bias(j);
        h(i, j) = hb;
        const T v = hb;
        const ST s = detail::gelu_sigmoid(v, k, c);
        sig(i, j) = s;
        a(i, j) = v * T(s);
      });
}

// y = x · sig = gelu(x) again from the saved σ (bitwise the forward's value; y overwritten).
template <class Exec, class XV, class SV, class YV>
void gelu_from_sigmoid(const Exec& exec, const XV& x /*[N, F]*/, const SV& sig /*[N, F]*/, const YV& y /*[N, F]*/) {
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, SV, 2>();
  detail::check_view<Exec, YV, 2>();
  detail::check_writable<YV>();
  detail::require(x.extent(0) == y.extent(0) && x.extent(1) == y.extent(1) && sig.extent(0) == y.extent(0) &&
                      sig.extent(1) == y.extent(1),
                  "gelu_from_sigmoid", "x, sig and y must have the same extents");
  using T = kx::acc_t<typename YV::non_const_value_type>;
  Kokkos::parallel_for(
      "tptrain::kernels::gelu_from_sigmoid", detail::range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        y(i, j) = kx::convert_to<T>(x(i, j)) * kx::convert_to<T>(sig(i, j));
      });
}

// dx = dy * gelu'(x) with the saved σ(2u) (bitwise the unfused backward that recomputes σ; dx
// overwritten, may alias dy).
template <class Exec, class DYV, class XV, class SV, class DXV>
void gelu_backward_from_sigmoid(const Exec& exec,
                                const DYV& dy,    // [N, F]
                                const XV& x,      // [N, F] forward input
                                const SV& sig,    // [N, F] from bias_gelu_forward
                                const DXV& dx) {  // [N, F]
  detail::check_view<Exec, DYV, 2>();
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, SV, 2>();
  detail::check_view<Exec, DXV, 2>();
  detail::check_writable<DXV>();
  detail::require(x.extent(0) == dy.extent(0) && x.extent(1) == dy.extent(1) && x.extent(0) == dx.extent(0) &&
                      x.extent(1) == dx.extent(1) && sig.extent(0) == x.extent(0) && sig.extent(1) == x.extent(1),
                  "gelu_backward_from_sigmoid", "dy, x, sig and dx must have the same extents");
  using T = kx::acc_t<typename DXV::non_const_value_type>;
  const T k = static_cast<T>(detail::gelu_k);
  const T c = static_cast<T>(detail::gelu_c);
  Kokkos::parallel_for(
      "tptrain::kernels::gelu_backward_from_sigmoid", detail::range2d(exec, dx.extent(0), dx.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        const T v = x(i, j);
        dx(i, j) = dy(i, j) * detail::gelu_grad(v, kx::convert_to<T>(sig(i, j)), k, c);
      });
}

namespace detail {

// gelu_backward_from_sigmoid's value at (i, j), stored, and summed for the bias gradient.
template <class DYV, class XV, class SV, class DXV, class DBV>
struct GeluBackwardBiasOp {
  using value_type = kx::acc_t<typename DBV::non_const_value_type>;
  using T = kx::acc_t<typename DXV::non_const_value_type>;
  using DXT = typename DXV::non_const_value_type;
  static constexpr int terms = 1;
  DYV dy;
  XV x;
  SV sig;
  DXV dx;
  DBV db;
  T k, c;
  KOKKOS_INLINE_FUNCTION void summands(const std::int64_t i, const std::int64_t j, value_type (&s)[1]) const {
    const T v = x(i, j);
    const DXT g = DXT(dy(i, j) * gelu_grad(v, kx::convert_to<T>(sig(i, j)), k, c));
    dx(i, j) = g;
    s[0] = value_type(g);
  }
  KOKKOS_INLINE_FUNCTION void accumulate(const std::int64_t j, const value_type (&sum)[1]) const { db(j) += sum[0]; }
};

}  // namespace detail

// gelu_backward_from_sigmoid and the gradient of the bias before the GELU (the MLP's fc bias,
// which bias_gelu_forward added) in one pass: dx = dy * gelu'(x), db(j) += Σ_rows dx(i, j).
// The column sums of bias_backward (column_sums.hpp: same order, so bitwise the unfused pair)
// with the GELU backward in their first stage: one launch fewer. dx may alias dy.
// `workspace`: rank 1, >= column_sums_workspace_size(N, F) elements of acc_t of db's type.
template <class Exec, class DYV, class XV, class SV, class DXV, class DBV, class WV,
          int CB = detail::ColumnBlock<Exec>::value>
void gelu_backward_bias_grad(const Exec& exec,
                             const DYV& dy,     // [N, F]
                             const XV& x,       // [N, F] forward input (after the bias)
                             const SV& sig,     // [N, F] from bias_gelu_forward
                             const DXV& dx,     // [N, F] out
                             const DBV& db,     // [F] accumulated
                             const WV& workspace) {
  detail::check_view<Exec, DYV, 2>();
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, SV, 2>();
  detail::check_view<Exec, DXV, 2>();
  detail::check_view<Exec, DBV, 1>();
  detail::check_writable<DXV>();
  detail::check_writable<DBV>();
  detail::require(x.extent(0) == dy.extent(0) && x.extent(1) == dy.extent(1) && x.extent(0) == dx.extent(0) &&
                      x.extent(1) == dx.extent(1) && sig.extent(0) == x.extent(0) && sig.extent(1) == x.extent(1) &&
                      db.extent(0) == x.extent(1),
                  "gelu_backward_bias_grad", "dy, x, sig and dx must have the same extents, db [F]");
  using Op = detail::GeluBackwardBiasOp<DYV, XV, SV, DXV, DBV>;
  using T = typename Op::T;
  column_sums<Exec, Op, WV, CB>(exec, "gelu_backward_bias_grad", x.extent(0), x.extent(1),
                                Op{dy, x, sig, dx, db, static_cast<T>(detail::gelu_k), static_cast<T>(detail::gelu_c)},
                                workspace);
}

}  // namespace tptrain::kernels
