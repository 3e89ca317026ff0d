// Whole-view reductions for gradient clipping and NaN/Inf checks. Both return to the host (they
// wait for the kernel). Views: rank 1 or 2, any layout, managed or unmanaged, subviews.
//   squared_norm(exec, v) → double  Σ v², accumulated in double
//   all_finite(exec, v)   → bool    no NaN / ±Inf
// and, per flat gradient bucket (FlatSegments), the two sums of squares a global gradient norm
// needs, in one launch:
//   bucket_squared_norms(exec, grad, segments)      → {sharded, replicated}  (waits)
//   bucket_squared_norms(exec, grad, segments, out)   out[2] on the device    (does not wait)
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/flat_segments.hpp"

namespace tptrain::kernels {

// Σ grad² over a bucket's counted segments, split by how the TP group holds them: the caller
// sums `sharded` over the TP ranks and adds `replicated` once.
struct BucketSquaredNorms {
  double sharded = 0, replicated = 0;
};

namespace detail {

template <class Exec, class V>
double squared_norm_1d(const Exec& exec, const V& v) {
  double result = 0;
  Kokkos::parallel_reduce(
      "tptrain::kernels::squared_norm", range(exec, v.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i, double& acc) {
        const double x = kx::convert_to<double>(v(i));
        acc += x * x;
      },
      result);
  return result;
}
template <class Exec, class V>
double squared_norm_2d(const Exec& exec, const V& v) {
  double result = 0;
  Kokkos::parallel_reduce(
      "tptrain::kernels::squared_norm", range2d(exec, v.extent(0), v.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j, double& acc) {
        const double x = kx::convert_to<double>(v(i, j));
        acc += x * x;
      },
      result);
  return result;
}

template <class Exec, class V>
std::int64_t count_nonfinite_1d(const Exec& exec, const V& v) {
  std::int64_t result = 0;
  Kokkos::parallel_reduce(
      "tptrain::kernels::all_finite", range(exec, v.extent(0)),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& acc) {
        if (!kx::isfinite(kx::convert_to<kx::acc_t<typename V::non_const_value_type>>(v(i)))) ++acc;
      },
      result);
  return result;
}
template <class Exec, class V>
std::int64_t count_nonfinite_2d(const Exec& exec, const V& v) {
  std::int64_t result = 0;
  Kokkos::parallel_reduce(
      "tptrain::kernels::all_finite", range2d(exec, v.extent(0), v.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t i, const std::int64_t j, std::int64_t& acc) {
        if (!kx::isfinite(kx::convert_to<kx::acc_t<typename V::non_const_value_type>>(v(i, j))))
          ++acc;
      },
      result);
  return result;
}

// An array reduction of two doubles, {sharded, replicated}: a functor, since only functors can
// declare a runtime value_count. Kokkos' default init (zero) and join (elementwise +) are the
// ones wanted, and leaving them out avoids the volatile join signature that Kokkos 3.4 needs and
// 4.x deprecates. One team per chunk; a chunk lies in one segment, so its sum goes to one slot.
template <class Exec, class GV>
struct BucketSquaredNormsFunctor {
  using value_type = double[];
  using member_type = typename Teams<Exec>::member_type;
  std::size_t value_count = 2;
  typename FlatSegments<Exec>::chunk_view chunks;
  GV grad;

  BucketSquaredNormsFunctor(const typename FlatSegments<Exec>::chunk_view& c, const GV& g)
      : chunks(c), grad(g) {}

  KOKKOS_INLINE_FUNCTION void operator()(const member_type& team, value_type sums) const {
    const FlatChunk c = chunks(team.league_rank());
    if (c.norm_slot < 0) return;  // the whole team returns: no team collective is left waiting
    double s = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, c.begin, c.end),
        [&](const std::int64_t i, double& acc) {
          const double x = kx::convert_to<double>(grad(i));
          acc += x * x;
        },
        s);
    Kokkos::single(Kokkos::PerTeam(team), [&]() { sums[c.norm_slot] += s; });
  }
};

template <class Exec, class GV>
void check_bucket_grad(const GV& grad, const FlatSegments<Exec>& segments) {
  check_view<Exec, GV, 1>();
  require(grad.extent(0) == static_cast<std::size_t>(segments.size()), "bucket_squared_norms",
          "grad must be [segments.size()]");
}

}  // namespace detail

// Writes {sharded, replicated} into out [2] (a contiguous rank-1 double View accessible from
// Exec, e.g. one row of a [buckets, 2] device View) without waiting, so that a step can reduce
// every bucket and copy all the sums to the host once.
template <class Exec, class GV, class OV>
void bucket_squared_norms(const Exec& exec, const GV& grad /*[n]*/,
                          const FlatSegments<Exec>& segments, const OV& out /*[2]*/) {
  detail::check_bucket_grad(grad, segments);
  detail::check_view<Exec, OV, 1>();
  detail::check_writable<OV>();
  static_assert(std::is_same<typename OV::value_type, double>::value,
                "tptrain::kernels::bucket_squared_norms: out must hold double");
  detail::require(out.extent(0) == 2 && out.span_is_contiguous(), "bucket_squared_norms",
                  "out must be a contiguous [2]");
  const auto chunks = segments.chunks();
  Kokkos::parallel_reduce(
      "tptrain::kernels::bucket_squared_norms",
      detail::teams(exec, static_cast<std::int64_t>(chunks.extent(0)), "bucket_squared_norms"),
      detail::BucketSquaredNormsFunctor<Exec, GV>(chunks, grad), out);
}

// The same, returned to the host (waits for the kernel).
template <class Exec, class GV>
BucketSquaredNorms bucket_squared_norms(const Exec& exec, const GV& grad /*[n]*/,
                                        const FlatSegments<Exec>& segments) {
  detail::check_bucket_grad(grad, segments);
  double sums[2] = {0, 0};
  // Kokkos 4 takes no raw pointer as an array reduction's result, and a View result does not
  // wait: hence a host View over `sums` and a fence.
  const Kokkos::View<double*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> result(
      sums, 2);
  const auto chunks = segments.chunks();
  Kokkos::parallel_reduce(
      "tptrain::kernels::bucket_squared_norms",
      detail::teams(exec, static_cast<std::int64_t>(chunks.extent(0)), "bucket_squared_norms"),
      detail::BucketSquaredNormsFunctor<Exec, GV>(chunks, grad), result);
  kx::fence(exec, "tptrain::kernels::bucket_squared_norms");
  return {sums[0], sums[1]};
}

template <class Exec, class V>
double squared_norm(const Exec& exec, const V& v) {  // v: [n] or [n0, n1]
  constexpr int rank = static_cast<int>(V::rank);
  static_assert(rank == 1 || rank == 2, "tptrain::kernels::squared_norm: rank-1 or rank-2 view");
  detail::check_view<Exec, V, rank>();
  if constexpr (rank == 1) {
    return detail::squared_norm_1d(exec, v);
  } else {
    return detail::squared_norm_2d(exec, v);
  }
}

template <class Exec, class V>
bool all_finite(const Exec& exec, const V& v) {  // v: [n] or [n0, n1]
  constexpr int rank = static_cast<int>(V::rank);
  static_assert(rank == 1 || rank == 2, "tptrain::kernels::all_finite: rank-1 or rank-2 view");
  detail::check_view<Exec, V, rank>();
  if constexpr (rank == 1) {
    return detail::count_nonfinite_1d(exec, v) == 0;
  } else {
    return detail::count_nonfinite_2d(exec, v) == 0;
  }
}

}  // namespace tptrain::kernels
