// Squared ReLU (So et al. 2021, Primer: "Searching for Efficient Transformers for Language
// Modeling", section 3; Nemotron-4's MLP):
//   a = relu(h)²,   dh = da · 2·relu(h).
// Precision: every view may hold kx::bf16 / kx::fp16; the products are computed in acc_t of the
// output (float for 16-bit), and each output is rounded once.
// Views: rank 2, any layout, managed or unmanaged, subviews.
#pragma once

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

// a (overwritten; may be h) = relu(h)².
template <class Exec, class HV, class AV>
void squared_relu_forward(const Exec& exec, const HV& h /*[N, F]*/, const AV& a /*[N, F]*/) {
  detail::check_view<Exec, HV, 2>();
  detail::check_view<Exec, AV, 2>();
  detail::check_writable<AV>();
  detail::require(h.extent(0) == a.extent(0) && h.extent(1) == a.extent(1), "squared_relu_forward",
                  "shapes must be h[N, F] and a[N, F]");
  using T = kx::acc_t<typename AV::non_const_value_type>;
  Kokkos::parallel_for(
      "tptrain::kernels::squared_relu_forward", detail::range2d(exec, a.extent(0), a.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        const T r = kx::max(static_cast<T>(h(i, j)), T(0));
        a(i, j) = r * r;
      });
}

// dh (overwritten; may be da: each element is read before it is written) = da · 2·relu(h).
template <class Exec, class DAV, class HV, class DHV>
void squared_relu_backward(const Exec& exec, const DAV& da /*[N, F]*/, const HV& h /*[N, F]*/,
                           const DHV& dh /*[N, F]*/) {
  detail::check_view<Exec, DAV, 2>();
  detail::check_view<Exec, HV, 2>();
  detail::check_view<Exec, DHV, 2>();
  detail::check_writable<DHV>();
  detail::require(h.extent(0) == da.extent(0) && h.extent(1) == da.extent(1) && dh.extent(0) == h.extent(0) &&
                      dh.extent(1) == h.extent(1),
                  "squared_relu_backward", "shapes must be da[N, F], h[N, F] and dh[N, F]");
  using T = kx::acc_t<typename DHV::non_const_value_type>;
  Kokkos::parallel_for(
      "tptrain::kernels::squared_relu_backward", detail::range2d(exec, da.extent(0), da.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        const T r = kx::max(static_cast<T>(h(i, j)), T(0));
        dh(i, j) = static_cast<T>(da(i, j)) * T(2) * r;
      });
}

}  // namespace tptrain::kernels
