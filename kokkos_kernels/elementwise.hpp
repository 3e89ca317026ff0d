// Elementwise kernels on rank-1 or rank-2 views (any layout, managed or unmanaged, subviews):
//   add(exec, a, b, out)     out = a + b
//   add_inplace(exec, y, x)  y += x
//   scale(exec, y, alpha)    y *= alpha
//   fill(exec, y, value)     y = value
//   copy(exec, src, dst)     dst = src
//   convert(exec, src, dst)  dst = src in dst's value type, rounded to nearest even (float master
//                            weights -> their bf16 / fp16 compute copy, and back)
// All views of one call have the same rank and extents. Any of them may hold kx::bf16 / kx::fp16:
// the arithmetic then runs in float and each result is rounded once when stored.
#pragma once

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

namespace detail {

template <class V>
constexpr int rank_of() {
  return static_cast<int>(V::rank);
}

template <class A, class B>
bool same_extents(const A& a, const B& b) {
  for (int r = 0; r < rank_of<A>(); ++r) {
    if (a.extent(r) != b.extent(r)) return false;
  }
  return true;
}

template <class Exec, class AV, class BV, class OV>
void add_1d(const Exec& exec, const AV& a, const BV& b, const OV& out) {
  Kokkos::parallel_for(
      "tptrain::kernels::add", range(exec, out.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) { out(i) = a(i) + b(i); });
}
template <class Exec, class AV, class BV, class OV>
void add_2d(const Exec& exec, const AV& a, const BV& b, const OV& out) {
  Kokkos::parallel_for(
      "tptrain::kernels::add", range2d(exec, out.extent(0), out.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) { out(i, j) = a(i, j) + b(i, j); });
}

template <class Exec, class YV, class XV>
void add_inplace_1d(const Exec& exec, const YV& y, const XV& x) {
  Kokkos::parallel_for(
      "tptrain::kernels::add_inplace", range(exec, y.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) { y(i) += x(i); });
}
template <class Exec, class YV, class XV>
void add_inplace_2d(const Exec& exec, const YV& y, const XV& x) {
  Kokkos::parallel_for(
      "tptrain::kernels::add_inplace", range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) { y(i, j) += x(i, j); });
}

template <class Exec, class YV, class T>
void scale_1d(const Exec& exec, const YV& y, const T alpha) {
  Kokkos::parallel_for(
      "tptrain::kernels::scale", range(exec, y.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) { y(i) *= alpha; });
}
template <class Exec, class YV, class T>
void scale_2d(const Exec& exec, const YV& y, const T alpha) {
  Kokkos::parallel_for(
      "tptrain::kernels::scale", range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) { y(i, j) *= alpha; });
}

template <class Exec, class YV, class T>
void fill_1d(const Exec& exec, const YV& y, const T value) {
  Kokkos::parallel_for(
      "tptrain::kernels::fill", range(exec, y.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) { y(i) = value; });
}
template <class Exec, class YV, class T>
void fill_2d(const Exec& exec, const YV& y, const T value) {
  Kokkos::parallel_for(
      "tptrain::kernels::fill", range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) { y(i, j) = value; });
}

// dst = src through kx::convert_to (bf16 -> fp16 included; float <-> double as built in).
template <class Exec, class SV, class DV>
void copy_1d(const Exec& exec, const SV& src, const DV& dst, const char* label) {
  using DT = typename DV::non_const_value_type;
  Kokkos::parallel_for(
      label, range(exec, dst.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i) { dst(i) = kx::convert_to<DT>(src(i)); });
}
template <class Exec, class SV, class DV>
void copy_2d(const Exec& exec, const SV& src, const DV& dst, const char* label) {
  using DT = typename DV::non_const_value_type;
  Kokkos::parallel_for(
      label, range2d(exec, dst.extent(0), dst.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j) {
        dst(i, j) = kx::convert_to<DT>(src(i, j));
      });
}

template <class Exec, class V>
constexpr void check_view_1d_or_2d() {
  static_assert(rank_of<V>() == 1 || rank_of<V>() == 2,
                "tptrain::kernels: elementwise kernels take rank-1 or rank-2 views");
  check_view<Exec, V, rank_of<V>()>();
}

// copy and convert: one kernel under two names (`kernel`: the public name, for messages and the
// Kokkos label).
template <class Exec, class SV, class DV>
void copy_converting(const Exec& exec, const SV& src, const DV& dst, const char* kernel, const char* label) {
  check_view_1d_or_2d<Exec, DV>();
  check_view<Exec, SV, rank_of<DV>()>();
  check_writable<DV>();
  require(same_extents(src, dst), kernel, "src and dst must have the same extents");
  if constexpr (rank_of<DV>() == 1) {
    copy_1d(exec, src, dst, label);
  } else {
    copy_2d(exec, src, dst, label);
  }
}

}  // namespace detail

// out = a + b
template <class Exec, class AV, class BV, class OV>
void add(const Exec& exec,
         const AV& a,      // [N] or [N, M]
         const BV& b,      // same as a
         const OV& out) {  // same as a
  detail::check_view_1d_or_2d<Exec, OV>();
  detail::check_view<Exec, AV, detail::rank_of<OV>()>();
  detail::check_view<Exec, BV, detail::rank_of<OV>()>();
  detail::check_writable<OV>();
  detail::require(detail::same_extents(a, out) && detail::same_extents(b, out), "add",
                  "a, b and out must have the same extents");
  if constexpr (detail::rank_of<OV>() == 1) {
    detail::add_1d(exec, a, b, out);
  } else {
    detail::add_2d(exec, a, b, out);
  }
}

// y += x
template <class Exec, class YV, class XV>
void add_inplace(const Exec& exec,
                 const YV& y,    // [N] or [N, M]
                 const XV& x) {  // same as y
  detail::check_view_1d_or_2d<Exec, YV>();
  detail::check_view<Exec, XV, detail::rank_of<YV>()>();
  detail::check_writable<YV>();
  detail::require(detail::same_extents(x, y), "add_inplace", "x and y must have the same extents");
  if constexpr (detail::rank_of<YV>() == 1) {
    detail::add_inplace_1d(exec, y, x);
  } else {
    detail::add_inplace_2d(exec, y, x);
  }
}

// y *= alpha (a 16-bit y: the product in float, rounded once)
template <class Exec, class YV>
void scale(const Exec& exec,
           const YV& y,  // [N] or [N, M]
           const kx::acc_t<typename YV::non_const_value_type> alpha) {
  detail::check_view_1d_or_2d<Exec, YV>();
  detail::check_writable<YV>();
  if constexpr (detail::rank_of<YV>() == 1) {
    detail::scale_1d(exec, y, alpha);
  } else {
    detail::scale_2d(exec, y, alpha);
  }
}

// y = value
template <class Exec, class YV>
void fill(const Exec& exec,
          const YV& y,  // [N] or [N, M]
          const typename YV::non_const_value_type value) {
  detail::check_view_1d_or_2d<Exec, YV>();
  detail::check_writable<YV>();
  if constexpr (detail::rank_of<YV>() == 1) {
    detail::fill_1d(exec, y, value);
  } else {
    detail::fill_2d(exec, y, value);
  }
}

// dst = src
template <class Exec, class SV, class DV>
void copy(const Exec& exec,
          const SV& src,    // [N] or [N, M]
          const DV& dst) {  // same as src
  detail::copy_converting(exec, src, dst, "copy", "tptrain::kernels::copy");
}

// dst = src converted to dst's value type: float/double -> bf16/fp16 rounds to nearest even
// (a double goes through float, see kx::convert_to), 16-bit -> float/double is exact. The same
// kernel as copy, under its own name for the mixed-precision call sites.
template <class Exec, class SV, class DV>
void convert(const Exec& exec,
             const SV& src,    // [N] or [N, M]
             const DV& dst) {  // same extents as src, any value type
  detail::copy_converting(exec, src, dst, "convert", "tptrain::kernels::convert");
}

}  // namespace tptrain::kernels
