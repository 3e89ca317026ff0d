// SwiGLU's gating (Shazeer 2020; Llama's MLP): from the fc output h = [gate | up] of F columns
// each (a tensor-parallel rank's [N, 2F/t]: its slice of gate, then the same slice of up),
//   a = silu(gate) · up,  silu(g) = g · σ(g)
// and the backward, with s = σ(g):
//   d gate = da · up · s · (1 + g · (1 − s)),   d up = da · silu(g).
// σ(g) = 1 / (1 + exp(−g)): exp(−g) may overflow to +inf for very negative g, then σ = 0, and
// silu and both gradients are 0, never NaN.
// Precision: every view may hold kx::bf16 / kx::fp16; σ and the products are computed in acc_t
// of the output (float for 16-bit), and each output is rounded once.
// Views: rank 2, any layout, managed or unmanaged, subviews.
#pragma once

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

namespace detail {
template <class T>
KOKKOS_INLINE_FUNCTION T sigmoid(const T g) {
  return T(1) / (T(1) + kx::exp(-g));
}
}  // namespace detail

// a (overwritten, must not alias h) = silu(h[:, :F]) · h[:, F:], F = a's columns.
template <class Exec, class HV, class AV>
void silu_mul_forward(const Exec& exec, const HV& h /*[N, 2F]*/, const AV& a /*[N, F]*/) {
  detail::check_view<Exec, HV, 2>();
  detail::check_view<Exec, AV, 2>();
  detail::check_writable<AV>();
  detail::require(h.extent(0) == a.extent(0) && h.extent(1) == 2 * a.extent(1), "silu_mul_forward",
                  "shapes must be h[N, 2F] (gate, then up) and a[N, F]");
  using T = kx::acc_t<typename AV::non_const_value_type>;
  const std::int64_t f = a.extent(1);
  Kokkos::parallel_for(
      "tptrain::kernels::silu_mul_forward", detail::range2d(exec, a.extent(0), a.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        const T g = static_cast<T>(h(i, j));
        a(i, j) = g * detail::sigmoid(g) * static_cast<T>(h(i, j + f));
      });
}

// dh (overwritten; must not alias h or da) = [d gate | d up] from da.
template <class Exec, class DAV, class HV, class DHV>
void silu_mul_backward(const Exec& exec, const DAV& da /*[N, F]*/, const HV& h /*[N, 2F]*/, const DHV& dh /*[N, 2F]*/) {
  detail::check_view<Exec, DAV, 2>();
  detail::check_view<Exec, HV, 2>();
  detail::check_view<Exec, DHV, 2>();
  detail::check_writable<DHV>();
  detail::require(h.extent(0) == da.extent(0) && h.extent(1) == 2 * da.extent(1) && dh.extent(0) == h.extent(0) &&
                      dh.extent(1) == h.extent(1),
                  "silu_mul_backward", "shapes must be da[N, F], h[N, 2F] and dh[N, 2F]");
  using T = kx::acc_t<typename DHV::non_const_value_type>;
  const std::int64_t f = da.extent(1);
  Kokkos::parallel_for(
      "tptrain::kernels::silu_mul_backward", detail::range2d(exec, da.extent(0), da.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        const T g = static_cast<T>(h(i, j));
        const T u = static_cast<T>(h(i, j + f));
        const T d = static_cast<T>(da(i, j));
        const T s = detail::sigmoid(g);
        dh(i, j) = d * u * s * (T(1) + g * (T(1) - s));
        dh(i, j + f) = d * g * s;
      });
}

}  // namespace tptrain::kernels
