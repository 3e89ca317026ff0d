// Grouped-query attention's key/value sharing by copy (Ainslie et al. 2023; Hugging Face's
// repeat_kv), a test reference: query head h uses key/value head h / g, g = q_heads / kv_heads.
// repeat_kv_forward copies a grouped buffer [N, (q_heads + 2·kv_heads)·d] (Q, then K, then V) into
// the multi-head layout [N, 3·q_heads·d], and repeat_kv_backward sums the gradient of each group's
// copies back, in acc_t (float for 16-bit), rounded once. The attention cores read the grouped
// buffer in place; the tests compare them with multi-head attention on the copy.
// Views: rank 2, any layout, managed or unmanaged, subviews; no aliasing.
#pragma once

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

namespace detail {
inline void check_repeat_kv(std::size_t grouped_rows, std::size_t grouped_cols, std::size_t full_rows,
                            std::size_t full_cols, std::int64_t q_heads, std::int64_t kv_heads, std::int64_t d,
                            const char* kernel) {
  require(q_heads > 0 && kv_heads > 0 && d > 0 && q_heads % kv_heads == 0, kernel,
          "q_heads must be a positive multiple of kv_heads, d positive");
  require(grouped_rows == full_rows && static_cast<std::int64_t>(grouped_cols) == (q_heads + 2 * kv_heads) * d &&
              static_cast<std::int64_t>(full_cols) == 3 * q_heads * d,
          kernel, "shapes must be grouped[N, (q_heads + 2 kv_heads) d] and full[N, 3 q_heads d]");
}
}  // namespace detail

template <class Exec, class GV, class FV>
void repeat_kv_forward(const Exec& exec, const GV& grouped, const FV& full, const std::int64_t q_heads,
                       const std::int64_t kv_heads, const std::int64_t d) {
  detail::check_view<Exec, GV, 2>();
  detail::check_view<Exec, FV, 2>();
  detail::check_writable<FV>();
  detail::check_repeat_kv(grouped.extent(0), grouped.extent(1), full.extent(0), full.extent(1), q_heads, kv_heads, d,
                          "repeat_kv_forward");
  const std::int64_t hq = q_heads * d, hk = kv_heads * d, g = q_heads / kv_heads;
  Kokkos::parallel_for(
      "tptrain::kernels::repeat_kv_forward", detail::range2d(exec, full.extent(0), full.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t r, const std::int64_t c) {
        const std::int64_t part = c / hq, in = c % hq;  // 0 Q, 1 K, 2 V; column within the part
        const std::int64_t src = part == 0 ? in : hq + (part - 1) * hk + (in / d / g) * d + in % d;
        full(r, c) = grouped(r, src);
      });
}

template <class Exec, class FV, class GV>
void repeat_kv_backward(const Exec& exec, const FV& d_full, const GV& d_grouped, const std::int64_t q_heads,
                        const std::int64_t kv_heads, const std::int64_t d) {
  detail::check_view<Exec, FV, 2>();
  detail::check_view<Exec, GV, 2>();
  detail::check_writable<GV>();
  detail::check_repeat_kv(d_grouped.extent(0), d_grouped.extent(1), d_full.extent(0), d_full.extent(1), q_heads,
                          kv_heads, d, "repeat_kv_backward");
  using T = kx::acc_t<typename GV::non_const_value_type>;
  const std::int64_t hq = q_heads * d, hk = kv_heads * d, g = q_heads / kv_heads;
  Kokkos::parallel_for(
      "tptrain::kernels::repeat_kv_backward", detail::range2d(exec, d_grouped.extent(0), d_grouped.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t r, const std::int64_t c) {
        if (c < hq) {
          d_grouped(r, c) = d_full(r, c);
          return;
        }
        const std::int64_t part = (c - hq) / hk, in = (c - hq) % hk;  // 0 K, 1 V
        const std::int64_t head = in / d, i = in % d;
        T sum = 0;
        for (std::int64_t m = 0; m < g; ++m) sum += static_cast<T>(d_full(r, hq * (1 + part) + (head * g + m) * d + i));
        d_grouped(r, c) = sum;
      });
}

}  // namespace tptrain::kernels
