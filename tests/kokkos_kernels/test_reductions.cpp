// squared_norm (accumulated in double) and all_finite on 1D and 2D views; bucket_squared_norms
// over a flat bucket against a double reference and the per-parameter squared_norm.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "kokkos_kernels/reductions.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

TEMPLATE_TEST_CASE("squared_norm and all_finite", "[kernels]", float, double) {
  using T = TestType;
  const int N = 7, H = 13;
  std::mt19937 rng(91);
  tptrain::kx::ExecSpace exec;
  const auto h2 = tt::random_vec<T>(rng, N * H);
  const auto h1 = tt::random_vec<T>(rng, 101);
  auto m = tt::to_device<T>(h2, N, H);
  auto v = tt::to_device<T>(h1);
  double ref2 = 0, ref1 = 0;
  for (double x : h2) ref2 += x * x;
  for (double x : h1) ref1 += x * x;
  CHECK(std::fabs(tk::squared_norm(exec, m) - ref2) < 1e-12 * ref2);  // double accumulation
  CHECK(std::fabs(tk::squared_norm(exec, v) - ref1) < 1e-12 * ref1);
  auto block = Kokkos::subview(m, Kokkos::make_pair(2, 5), Kokkos::make_pair(3, 9));
  double refb = 0;
  for (int i = 2; i < 5; ++i)
    for (int j = 3; j < 9; ++j) refb += h2[i * H + j] * h2[i * H + j];
  CHECK(std::fabs(tk::squared_norm(exec, block) - refb) < 1e-12 * refb);

  CHECK(tk::all_finite(exec, m));
  CHECK(tk::all_finite(exec, v));
  auto hm = Kokkos::create_mirror_view(m);
  Kokkos::deep_copy(hm, m);
  hm(3, 4) = std::numeric_limits<T>::infinity();
  Kokkos::deep_copy(m, hm);
  CHECK_FALSE(tk::all_finite(exec, m));
  hm(3, 4) = std::numeric_limits<T>::quiet_NaN();
  Kokkos::deep_copy(m, hm);
  CHECK_FALSE(tk::all_finite(exec, m));
  CHECK(tk::all_finite(exec, Kokkos::subview(m, Kokkos::make_pair(0, 3), Kokkos::ALL)));

  // Float squares accumulate in double: 1e6 values of 1e-3 sum to 1 within double rounding
  // (a float accumulator would be off by ~1e-2).
  tk::Vector<T> small("small", 1000000);
  Kokkos::deep_copy(small, T(1e-3));
  const double expect = 1e6 * static_cast<double>(T(1e-3)) * static_cast<double>(T(1e-3));
  CHECK(std::fabs(tk::squared_norm(exec, small) - expect) < 1e-9 * expect);
}

namespace {

using tptrain::kernels::test::TeamSizeGuard;

}  // namespace

TEMPLATE_TEST_CASE("bucket_squared_norms splits a bucket's sum of squares by TP placement",
                   "[kernels][reductions]", float, double) {
  using T = TestType;
  using Exec = tptrain::kx::ExecSpace;
  Exec exec;
  struct Spec {
    std::int64_t length;
    bool replicated, counted;
  };
  // Empty segments first, inside and last; the uncounted segment (a tied embedding copy) holds
  // values 100× the others, so counting it anywhere breaks the comparison.
  const Spec specs[] = {{0, false, true},  {11, false, true}, {23, true, true}, {0, true, true},
                        {101, false, true}, {64, true, false}, {1, true, true},  {7, false, true},
                        {0, false, true}};
  std::vector<tk::FlatSegment> segments;
  std::int64_t n = 0;
  for (const Spec& s : specs) {
    segments.push_back({n, n + s.length, false, s.replicated, s.counted});
    n += s.length;
  }
  std::mt19937 rng(5);
  auto h = tt::random_vec<T>(rng, static_cast<std::size_t>(n));
  double ref_sharded = 0, ref_replicated = 0;
  for (const tk::FlatSegment& seg : segments) {
    for (std::int64_t i = seg.begin; i < seg.end; ++i) {
      auto& x = h[static_cast<std::size_t>(i)];
      if (!seg.counted) x = static_cast<double>(static_cast<T>(100 * x));  // as the kernel sees it
      (seg.replicated ? ref_replicated : ref_sharded) += seg.counted ? x * x : 0.0;
    }
  }
  auto grad = tt::to_device<T>(h);
  // The existing per-parameter kernel agrees as well.
  double per_param_sharded = 0, per_param_replicated = 0;
  for (const tk::FlatSegment& seg : segments) {
    if (!seg.counted) continue;
    const double s = tk::squared_norm(exec, Kokkos::subview(grad, std::make_pair(seg.begin, seg.end)));
    (seg.replicated ? per_param_replicated : per_param_sharded) += s;
  }

  for (const std::int64_t chunk : {std::int64_t(1), std::int64_t(6), std::int64_t(64),
                                   tk::detail::default_flat_chunk<Exec>()}) {
    for (const int ts : tt::team_sizes(exec)) {
      INFO("chunk " << chunk << ", team size " << ts);
      const TeamSizeGuard guard(ts);
      const tk::FlatSegments<Exec> table(segments, chunk);
      const tk::BucketSquaredNorms got = tk::bucket_squared_norms(exec, grad, table);
      CHECK(std::fabs(got.sharded - ref_sharded) < 1e-13 * ref_sharded);
      CHECK(std::fabs(got.replicated - ref_replicated) < 1e-13 * ref_replicated);
      CHECK(std::fabs(got.sharded - per_param_sharded) < 1e-13 * ref_sharded);
      CHECK(std::fabs(got.replicated - per_param_replicated) < 1e-13 * ref_replicated);
    }
    // Deterministic: the same launch gives the same bits; the device-result form (one row of a
    // [buckets, 2] view, no wait) gives them too and leaves the other rows alone.
    const tk::FlatSegments<Exec> table(segments, chunk);
    const tk::BucketSquaredNorms a = tk::bucket_squared_norms(exec, grad, table);
    const tk::BucketSquaredNorms b = tk::bucket_squared_norms(exec, grad, table);
    CHECK(a.sharded == b.sharded);
    CHECK(a.replicated == b.replicated);
    Kokkos::View<double**, Kokkos::LayoutRight, tptrain::kx::MemSpace> rows("rows", 3, 2);
    Kokkos::deep_copy(rows, -1.0);
    tk::bucket_squared_norms(exec, grad, table, Kokkos::subview(rows, 1, Kokkos::ALL));
    const auto hr = tt::to_host(rows);
    CHECK(hr == tt::HostVec{-1, -1, a.sharded, a.replicated, -1, -1});
  }

  // A bucket with nothing counted, and an empty one, sum to zero.
  std::vector<tk::FlatSegment> uncounted = segments;
  for (auto& s : uncounted) s.counted = false;
  const tk::BucketSquaredNorms zero =
      tk::bucket_squared_norms(exec, grad, tk::FlatSegments<Exec>(uncounted, 5));
  CHECK(zero.sharded == 0.0);
  CHECK(zero.replicated == 0.0);
  tk::Vector<T> none("none", 0);
  const tk::BucketSquaredNorms empty =
      tk::bucket_squared_norms(exec, none, tk::FlatSegments<Exec>(std::vector<tk::FlatSegment>{}));
  CHECK(empty.sharded == 0.0);
  CHECK(empty.replicated == 0.0);
  CHECK_THROWS_AS(tk::bucket_squared_norms(exec, none, tk::FlatSegments<Exec>(segments)),
                  std::invalid_argument);
}
