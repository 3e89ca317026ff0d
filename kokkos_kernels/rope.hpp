// Rotary position embedding (Su et al. 2021) on the q and k heads of a QKV buffer, in Hugging
// Face Llama's rotate-half convention (docs/design.md, "The llama block"): within a head of d
// features, feature i pairs with feature i + d/2 (i < d/2), and at position p
//   x'_i       = x_i cos(p·ω_i) − x_{i+d/2} sin(p·ω_i)
//   x'_{i+d/2} = x_{i+d/2} cos(p·ω_i) + x_i sin(p·ω_i),     ω_i = θ^(−2i/d)
// (or a scaled RoPE's frequencies, and an amplitude a on cos and sin: rope_tables).
// The backward applies the transposed rotation (the angle negated) to the gradient.
// The tables cos, sin [S, d/2] are computed once (rope_tables, in double, stored in the tables'
// type) and read by every layer. Row r of a [N, ·] buffer is token r of a micro-batch of
// sequences of S tokens: position r mod S, or positions(r) where the caller gives position ids
// (documents whose positions restart, data.reset_positions).
// Precision: the buffer may hold kx::bf16 / kx::fp16; each rotated pair is computed in acc_t of
// it (float) from the stored values and rounded once.
#pragma once

#include <cmath>
#include <vector>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/views.hpp"

namespace tptrain::kernels {

// cos(p·ω_i)·a, sin(p·ω_i)·a for p < S (rows), i < d/2 (columns), d = 2 · columns: the
// angles' inverse frequencies ω [d/2] given (a scaled RoPE's: Llama 3.1's, YaRN's; the model's
// position kinds compute them) and an amplitude a (YaRN's attention factor; 1 otherwise).
template <class Exec, class CV, class SV>
void rope_tables(const Exec& exec, const CV& cos, const SV& sin, const std::vector<double>& inverse_frequencies,
                 const double amplitude = 1.0) {
  detail::check_view<Exec, CV, 2>();
  detail::check_view<Exec, SV, 2>();
  detail::check_writable<CV>();
  detail::check_writable<SV>();
  detail::require(cos.extent(0) == sin.extent(0) && cos.extent(1) == sin.extent(1) && cos.extent(1) > 0,
                  "rope_tables", "cos and sin must both be [S, d/2] with d >= 2");
  detail::require(inverse_frequencies.size() == cos.extent(1), "rope_tables",
                  "one inverse frequency per rotated pair (d/2 of them)");
  detail::require(amplitude > 0, "rope_tables", "the amplitude must be positive");
  using Memory = typename Exec::memory_space;
  Kokkos::View<double*, Memory> omega("tptrain::kernels::rope_tables::omega", inverse_frequencies.size());
  Kokkos::deep_copy(exec, omega,
                    Kokkos::View<const double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                        inverse_frequencies.data(), inverse_frequencies.size()));
  Kokkos::parallel_for(
      "tptrain::kernels::rope_tables", detail::range2d(exec, cos.extent(0), cos.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t p, const std::int64_t i) {
        const double angle = static_cast<double>(p) * omega(i);
        cos(p, i) = amplitude * kx::cos(angle);
        sin(p, i) = amplitude * kx::sin(angle);
      });
  exec.fence();  // omega is freed on return
}

// The heads a rotation acts on: `count` heads, head h's d rotated features at columns
// [h·stride + offset, + d) — stride d and offset 0 (the default) for whole heads side by side;
// multi-head latent attention's decoupled rotary part, the last d_R of each query head's
// d_nope + d_R features, is stride d_nope + d_R, offset d_nope.
struct RotaryHeads {
  std::int64_t count = 0, stride = 0, offset = 0;  // stride 0: d
  // NOLINTNEXTLINE(google-explicit-constructor): a count alone is that many whole heads
  RotaryHeads(std::int64_t heads, std::int64_t head_stride = 0, std::int64_t first_feature = 0)
      : count(heads), stride(head_stride), offset(first_feature) {}
};

namespace detail {

// Rotates the heads' features in place by +angle (sign 1) or −angle (sign −1). Row r is at
// position r mod S, or with first >= 0 at position first + r (rows of one sequence), or with
// positions given (non-empty, [rows], each < S) at positions(r).
template <class Exec, class XV, class CV, class SV>
void rope_rotate(const Exec& exec, const XV& x, const CV& cos, const SV& sin, const RotaryHeads& rotated,
                 const double sign, const char* kernel, const std::int64_t first = -1,
                 const Tokens& positions = Tokens()) {
  check_view<Exec, XV, 2>();
  check_view<Exec, CV, 2>();
  check_view<Exec, SV, 2>();
  check_writable<XV>();
  const std::int64_t half = cos.extent(1), d = 2 * half, s = cos.extent(0);
  const std::int64_t heads = rotated.count, stride = rotated.stride > 0 ? rotated.stride : d, offset = rotated.offset;
  require(sin.extent(0) == cos.extent(0) && sin.extent(1) == cos.extent(1) && half > 0, kernel,
          "cos and sin must both be [S, d/2]");
  require(heads >= 0 && offset >= 0 && offset + d <= stride &&
              (heads == 0 || (heads - 1) * stride + offset + d <= static_cast<std::int64_t>(x.extent(1))),
          kernel, "the rotated heads must lie within the buffer's columns, d features of each stride");
  if (positions.size() > 0)
    require(positions.extent(0) == x.extent(0), kernel, "positions must hold one position per row");
  else if (first < 0)
    require(s > 0 && x.extent(0) % static_cast<std::size_t>(s) == 0, kernel,
            "the buffer's rows must be whole sequences of S tokens");
  else
    require(first + static_cast<std::int64_t>(x.extent(0)) <= s, kernel,
            "positions [first, first + rows) must lie within the tables' S positions");
  using T = kx::acc_t<typename XV::non_const_value_type>;
  const T sg = static_cast<T>(sign);
  Kokkos::parallel_for(
      std::string("tptrain::kernels::") + kernel, range2d(exec, x.extent(0), heads * half),
      KOKKOS_LAMBDA(const std::int64_t r, const std::int64_t k) {
        const bool given = positions.extent(0) > 0;
        const std::int64_t h = k / half, i = k % half, p = given ? positions(r) : first < 0 ? r % s : first + r;
        const std::int64_t a = h * stride + offset + i, b = a + half;
        const T c = static_cast<T>(cos(p, i)), sn = sg * static_cast<T>(sin(p, i));
        const T xa = static_cast<T>(x(r, a)), xb = static_cast<T>(x(r, b));
        x(r, a) = xa * c - xb * sn;
        x(r, b) = xb * c + xa * sn;
      });
}
}  // namespace detail

// Rotates the first `heads` heads of d = 2·cos.extent(1) features of qkv [N, ·] in place: with
// the layout [Q heads | K heads | V heads] and heads = q heads + k heads, q and k (or a slice
// of each head: RotaryHeads).
// positions (may be empty): each row's position id, [N], each < S.
template <class Exec, class XV, class CV, class SV>
void rope_forward(const Exec& exec, const XV& qkv, const CV& cos, const SV& sin, const RotaryHeads& heads,
                  const Tokens& positions = Tokens()) {
  detail::rope_rotate(exec, qkv, cos, sin, heads, 1.0, "rope_forward", -1, positions);
}
// rope_forward for the rows of one sequence at positions [first, first + rows): generation's new
// rows after `first` cached ones (src/model/kv_cache.hpp).
template <class Exec, class XV, class CV, class SV>
void rope_forward_at(const Exec& exec, const XV& qkv, const CV& cos, const SV& sin, const RotaryHeads& heads,
                     const std::int64_t first) {
  detail::require(first >= 0, "rope_forward_at", "the first position must be >= 0");
  detail::rope_rotate(exec, qkv, cos, sin, heads, 1.0, "rope_forward_at", first);
}
// The gradient through rope_forward, in place on the gradient of the same buffer.
template <class Exec, class XV, class CV, class SV>
void rope_backward(const Exec& exec, const XV& d_qkv, const CV& cos, const SV& sin, const RotaryHeads& heads,
                   const Tokens& positions = Tokens()) {
  detail::rope_rotate(exec, d_qkv, cos, sin, heads, -1.0, "rope_backward", -1, positions);
}

}  // namespace tptrain::kernels
