// AdamW (PyTorch torch.optim.AdamW semantics) on flat 1D views, plus flat_view() to run it over
// a contiguous 2D parameter without copying.
//   p ← p - lr·wd·p                       (decoupled weight decay, applied first)
//   m ← β1 m + (1-β1) g
//   v ← β2 v + (1-β2) g²
//   p ← p - lr · (m / (1-β1^t)) / (sqrt(v / (1-β2^t)) + eps)      t = step, 1-based
// Bias corrections are computed on the host in double; the update runs in acc_t of the
// parameter's type (the views' type for float/double master weights; float, with each stored
// value rounded once, should a parameter, a moment or the gradient be 16-bit).
//   adamw_update        one parameter
//   bucket_adamw_update a whole flat bucket in one launch (FlatSegments: per-segment weight
//                       decay), with g = grad_scale · grad (gradient clipping folded in)
#pragma once

#include <cmath>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/flat_segments.hpp"

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

namespace detail {

// The coefficients of one AdamW step, worked out on the host in double and rounded to T once;
// apply() is the per-element update. Both kernels below use it, so that a bucket update is
// bitwise the per-parameter one.
template <class T>
struct AdamWStep {
  T decay, b1, b2, one_minus_b1, one_minus_b2, step_size, sqrt_bc2, epsilon;

  AdamWStep(const double lr, const double beta1, const double beta2, const double eps,
            const double weight_decay, const std::int64_t step) {
    const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    decay = static_cast<T>(1.0 - lr * weight_decay);  // exactly 1 when weight_decay == 0
    b1 = static_cast<T>(beta1);
    b2 = static_cast<T>(beta2);
    one_minus_b1 = static_cast<T>(1.0 - beta1);
    one_minus_b2 = static_cast<T>(1.0 - beta2);
    step_size = static_cast<T>(lr / bc1);
    sqrt_bc2 = static_cast<T>(std::sqrt(bc2));
    epsilon = static_cast<T>(eps);
  }

  // `p_decay`: decay, or 1 for a parameter without weight decay (p·1 == p exactly). p, m, v:
  // references to elements of T or of a storage type widened to T.
  template <class P, class M, class V>
  KOKKOS_INLINE_FUNCTION void apply(P& p, M& m, V& v, const T g, const T p_decay) const {
    const T mi = b1 * T(m) + one_minus_b1 * g;
    const T vi = b2 * T(v) + one_minus_b2 * g * g;
    m = mi;
    v = vi;
    const T denom = kx::sqrt(vi) / sqrt_bc2 + epsilon;
    p = T(p) * p_decay - step_size * mi / denom;
  }
};

template <class Exec, class PV, class GV, class MV, class VV>
constexpr void check_adamw_views() {
  check_view<Exec, PV, 1>();
  check_view<Exec, GV, 1>();
  check_view<Exec, MV, 1>();
  check_view<Exec, VV, 1>();
  check_writable<PV>();
  check_writable<MV>();
  check_writable<VV>();
}

}  // namespace detail

template <class Exec, class PV, class GV, class MV, class VV>
void adamw_update(const Exec& exec,
                  const PV& param,  // [n] in/out
                  const GV& grad,   // [n]
                  const MV& m,      // [n] in/out, first moment (exp_avg)
                  const VV& v,      // [n] in/out, second moment (exp_avg_sq)
                  const double lr, const double beta1, const double beta2, const double eps,
                  const double weight_decay, const std::int64_t step /* 1-based */) {
  detail::check_adamw_views<Exec, PV, GV, MV, VV>();
  detail::require(grad.extent(0) == param.extent(0) && m.extent(0) == param.extent(0) &&
                      v.extent(0) == param.extent(0),
                  "adamw_update", "param, grad, m and v must have the same length");
  detail::require(step >= 1, "adamw_update", "step is 1-based");
  using T = kx::acc_t<typename PV::non_const_value_type>;
  const detail::AdamWStep<T> adam(lr, beta1, beta2, eps, weight_decay, step);
  Kokkos::parallel_for(
      "tptrain::kernels::adamw_update", detail::range(exec, param.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) {
        adam.apply(param(i), m(i), v(i), kx::convert_to<T>(grad(i)), adam.decay);
      });
}

// AdamW over every parameter of a flat bucket in one launch: param, grad, m, v are the bucket's
// four flat buffers ([segments.size()] each), weight decay only on the segments that ask for it.
// The gradient is read as g = grad_scale · grad(i) in T (the clipping factor; grad itself is not
// written), which is bitwise what kernels::scale(exec, grad, grad_scale) followed by
// adamw_update gives (float multiplication commutes; · 1 is exact), without the extra pass.
template <class Exec, class PV, class GV, class MV, class VV>
void bucket_adamw_update(const Exec& exec,
                         const PV& param,  // [n] in/out
                         const GV& grad,   // [n]
                         const MV& m,      // [n] in/out, exp_avg
                         const VV& v,      // [n] in/out, exp_avg_sq
                         const FlatSegments<Exec>& segments,  // n == segments.size()
                         const double lr, const double beta1, const double beta2,
                         const double eps, const double weight_decay,
                         const std::int64_t step /* 1-based */,
                         const kx::acc_t<typename PV::non_const_value_type> grad_scale = 1) {
  detail::check_adamw_views<Exec, PV, GV, MV, VV>();
  const auto n = static_cast<std::size_t>(segments.size());
  detail::require(param.extent(0) == n && grad.extent(0) == n && m.extent(0) == n &&
                      v.extent(0) == n,
                  "bucket_adamw_update", "param, grad, m and v must be [segments.size()]");
  detail::require(step >= 1, "bucket_adamw_update", "step is 1-based");
  using T = kx::acc_t<typename PV::non_const_value_type>;
  const detail::AdamWStep<T> adam(lr, beta1, beta2, eps, weight_decay, step);
  const auto chunks = segments.chunks();
  const T scale = grad_scale;
  const T no_decay = 1;
  using member_type = typename detail::Teams<Exec>::member_type;
  Kokkos::parallel_for(
      "tptrain::kernels::bucket_adamw_update",
      detail::teams(exec, static_cast<std::int64_t>(chunks.extent(0)), "bucket_adamw_update"),
      KOKKOS_LAMBDA(const member_type& team) {
        const detail::FlatChunk c = chunks(team.league_rank());
        const T p_decay = c.weight_decay ? adam.decay : no_decay;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c.begin, c.end),
                             [&](const std::int64_t i) {
                               const T g = scale * kx::convert_to<T>(grad(i));
                               adam.apply(param(i), m(i), v(i), g, p_decay);
                             });
      });
}

}  // namespace tptrain::kernels
