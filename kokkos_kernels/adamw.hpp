// AdamW (PyTorch torch.optim.AdamW semantics) on flat 1D views, plus flat_view() to run it over
// a contiguous 2D parameter without copying.
//   p ← p - lr·wd·p                       (decoupled weight decay, applied first)
//   m ← β1 m + (1-β1) g
//   v ← β2 v + (1-β2) g²
//   p ← p - lr · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + eps)      t = step, 1-based
// Bias corrections are computed on the host in double; the update runs in the views' type.
#pragma once

#include <cmath>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

// An unmanaged rank-1 view over all elements of a contiguous view (e.g. a LayoutRight Matrix
// or a row-range subview of one). Throws std::invalid_argument if the view is not contiguous.
template <class V>
Kokkos::View<typename V::value_type*, typename V::memory_space,
             Kokkos::MemoryTraits<Kokkos::Unmanaged>>
flat_view(const V& view) {  // [n0, n1] → [n0*n1]
  static_assert(Kokkos::is_view<V>::value, "tptrain::kernels::flat_view: argument must be a View");
  detail::require(view.span_is_contiguous() && view.span() == view.size(), "flat_view",
                  "view must be contiguous");
  return Kokkos::View<typename V::value_type*, typename V::memory_space,
                      Kokkos::MemoryTraits<Kokkos::Unmanaged>>(view.data(), view.size());
}

template <class Exec, class PV, class GV, class MV, class VV>
void adamw_update(const Exec& exec,
                  const PV& param,  // [n] in/out
                  const GV& grad,   // [n]
                  const MV& m,      // [n] in/out, first moment (exp_avg)
                  const VV& v,      // [n] in/out, second moment (exp_avg_sq)
                  const double lr, const double beta1, const double beta2, const double eps,
                  const double weight_decay, const std::int64_t step /* 1-based */) {
  detail::check_view<Exec, PV, 1>();
  detail::check_view<Exec, GV, 1>();
  detail::check_view<Exec, MV, 1>();
  detail::check_view<Exec, VV, 1>();
  detail::check_writable<PV>();
  detail::check_writable<MV>();
  detail::check_writable<VV>();
  detail::require(grad.extent(0) == param.extent(0) && m.extent(0) == param.extent(0) &&
                      v.extent(0) == param.extent(0),
                  "adamw_update", "param, grad, m and v must have the same length");
  detail::require(step >= 1, "adamw_update", "step is 1-based");
  using T = typename PV::non_const_value_type;
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  const T decay = static_cast<T>(1.0 - lr * weight_decay);
  const T b1 = static_cast<T>(beta1);
  const T b2 = static_cast<T>(beta2);
  const T one_minus_b1 = static_cast<T>(1.0 - beta1);
  const T one_minus_b2 = static_cast<T>(1.0 - beta2);
  const T step_size = static_cast<T>(lr / bc1);
  const T sqrt_bc2 = static_cast<T>(std::sqrt(bc2));
  const T epsilon = static_cast<T>(eps);
  Kokkos::parallel_for(
      "tptrain::kernels::adamw_update", detail::range(exec, param.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const T g = static_cast<T>(grad(i));
        const T mi = b1 * m(i) + one_minus_b1 * g;
        const T vi = b2 * v(i) + one_minus_b2 * g * g;
        m(i) = mi;
        v(i) = vi;
        const T denom = kx::sqrt(vi) / sqrt_bc2 + epsilon;
        param(i) = param(i) * decay - step_size * mi / denom;
      });
}

}  // namespace tptrain::kernels
