// AdamW against values worked out by hand (40-digit decimal arithmetic) for two steps, flat_view
// over 2D parameters, and the one-launch bucket update against the per-parameter one.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "kokkos_kernels/adamw.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

TEMPLATE_TEST_CASE("adamw matches hand-computed values for two steps", "[kernels]", float, double) {
  using T = TestType;
  // lr 0.1, beta1 0.9, beta2 0.999, eps 1e-8, weight decay 0.1. Element 0, step 1:
  //   p = 1 - 0.1·0.1·1 = 0.99;  m = 0.1·0.5 = 0.05;  v = 0.001·0.25 = 0.00025
  //   m̂ = 0.05/0.1 = 0.5;  v̂ = 0.00025/0.001 = 0.25;  p = 0.99 - 0.1·0.5/(0.5 + 1e-8)
  //     = 0.890000002
  // Element 1 has zero gradients (pure decay); element 2 changes sign between steps.
  const tt::HostVec p0{1.0, -2.0, 0.5};
  const tt::HostVec g1{0.5, 0.0, -1.0}, g2{-0.25, 0.0, 2.0};
  const tt::HostVec p1{0.89000000199999996000, -1.98, 0.59499999900000001000};
  const tt::HostVec m1{0.05, 0.0, -0.1}, v1{0.00025, 0.0, 0.001};
  const tt::HostVec p2{0.85446629868784616296, -1.9602, 0.55243964653792491169};
  const tt::HostVec m2{0.02, 0.0, 0.11}, v2{0.00031225, 0.0, 0.004999};

  tptrain::kx::ExecSpace exec;
  auto p = tt::to_device<T>(p0);
  tk::Vector<T> m("m", 3), v("v", 3);
  auto g = tt::to_device<T>(g1);
  tk::adamw_update(exec, p, g, m, v, 0.1, 0.9, 0.999, 1e-8, 0.1, 1);
  const double tol = sizeof(T) == sizeof(float) ? 1e-6 : 1e-13;
  CHECK(tt::max_rel_err(tt::to_host(p), p1) < tol);
  CHECK(tt::max_rel_err(tt::to_host(m), m1) < tol);
  CHECK(tt::max_rel_err(tt::to_host(v), v1) < tol);
  g = tt::to_device<T>(g2);
  tk::adamw_update(exec, p, g, m, v, 0.1, 0.9, 0.999, 1e-8, 0.1, 2);
  CHECK(tt::max_rel_err(tt::to_host(p), p2) < tol);
  CHECK(tt::max_rel_err(tt::to_host(m), m2) < tol);
  CHECK(tt::max_rel_err(tt::to_host(v), v2) < tol);

  CHECK_THROWS_AS(tk::adamw_update(exec, p, g, m, v, 0.1, 0.9, 0.999, 1e-8, 0.1, 0),
                  std::invalid_argument);
}

TEST_CASE("flat_view runs AdamW over a 2D parameter in place", "[kernels]") {
  using T = float;
  const int rows = 5, cols = 7;
  std::mt19937 rng(81);
  tptrain::kx::ExecSpace exec;
  const auto hp = tt::random_vec<T>(rng, rows * cols);
  const auto hg = tt::random_vec<T>(rng, rows * cols);
  auto P = tt::to_device<T>(hp, rows, cols);
  auto G = tt::to_device<T>(hg, rows, cols);
  tk::Matrix<T> M("M", rows, cols), V("V", rows, cols);
  auto p1 = tt::to_device<T>(hp);
  auto g1 = tt::to_device<T>(hg);
  tk::Vector<T> m1("m1", rows * cols), v1("v1", rows * cols);

  auto fp = tk::flat_view(P);
  static_assert(decltype(fp)::rank == 1, "flat_view is rank 1");
  CHECK(fp.extent(0) == static_cast<std::size_t>(rows * cols));
  CHECK(fp.data() == P.data());
  tk::adamw_update(exec, fp, tk::flat_view(G), tk::flat_view(M), tk::flat_view(V), 1e-3, 0.9, 0.95,
                   1e-8, 0.1, 1);
  tk::adamw_update(exec, p1, g1, m1, v1, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1);
  CHECK(tt::bitwise_equal(tt::to_host(P), tt::to_host(p1)));
  CHECK(tt::bitwise_equal(tt::to_host(M), tt::to_host(m1)));

  // A row range of a LayoutRight matrix is contiguous; a column block is not.
  auto rows_1_3 = Kokkos::subview(P, Kokkos::make_pair(1, 3), Kokkos::ALL);
  CHECK(tk::flat_view(rows_1_3).extent(0) == static_cast<std::size_t>(2 * cols));
  auto cols_1_3 = Kokkos::subview(P, Kokkos::ALL, Kokkos::make_pair(1, 3));
  CHECK_THROWS_AS(tk::flat_view(cols_1_3), std::invalid_argument);
}

// ---- bucket_adamw_update: one launch over a flat bucket ----------------------------------------

namespace {

using tptrain::kernels::test::TeamSizeGuard;

// A bucket of odd lengths: empty segments (first, middle, last), decay on and off, every norm
// flag (they must not change AdamW).
std::vector<tk::FlatSegment> odd_bucket() {
  struct Spec {
    std::int64_t length;
    bool decay, replicated, counted;
  };
  const Spec specs[] = {{0, false, true, true},   {5, true, false, true},  {13, false, true, true},
                        {0, true, false, true},   {1, false, false, true}, {37, true, false, true},
                        {29, true, false, false}, {3, false, true, true},  {0, false, false, true}};
  std::vector<tk::FlatSegment> segments;
  std::int64_t offset = 0;
  for (const Spec& s : specs) {
    segments.push_back({offset, offset + s.length, s.decay, s.replicated, s.counted});
    offset += s.length;
  }
  return segments;
}

}  // namespace

TEMPLATE_TEST_CASE("bucket_adamw_update is bitwise per-parameter scale + adamw_update", "[kernels][adamw]",
                   float, double) {
  using T = TestType;
  using Exec = tptrain::kx::ExecSpace;
  Exec exec;
  const std::vector<tk::FlatSegment> segments = odd_bucket();
  const std::int64_t n = segments.back().end;
  const double lr = 3e-2, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1;
  // Step 2 with a clipping factor, steps 1 and 3 without.
  const T clip[] = {T(1), static_cast<T>(0.3712345f), T(1)};

  for (const std::int64_t chunk : {std::int64_t(1), std::int64_t(4), std::int64_t(7),
                                   tk::detail::default_flat_chunk<Exec>()}) {
    for (const int ts : tt::team_sizes(exec)) {
      INFO("chunk " << chunk << ", team size " << ts);
      TeamSizeGuard guard(ts);
      const tk::FlatSegments<Exec> table(segments, chunk);
      REQUIRE(table.size() == n);
      std::mt19937 rng(2024);
      const auto hp = tt::random_vec<T>(rng, n);
      auto p = tt::to_device<T>(hp), p_ref = tt::to_device<T>(hp);
      tk::Vector<T> m("m", n), v("v", n), m_ref("m_ref", n), v_ref("v_ref", n);
      for (int step = 1; step <= 3; ++step) {
        INFO("step " << step);
        const auto hg = tt::random_vec<T>(rng, n);
        auto g = tt::to_device<T>(hg), g_ref = tt::to_device<T>(hg);
        const T s = clip[step - 1];
        tk::bucket_adamw_update(exec, p, g, m, v, table, lr, beta1, beta2, eps, wd, step, s);
        // The reference: the trainer's current path, scale the gradient, then one AdamW per
        // parameter.
        if (s != T(1)) tk::scale(exec, g_ref, s);
        for (const tk::FlatSegment& seg : segments) {
          const auto r = std::make_pair(seg.begin, seg.end);
          tk::adamw_update(exec, Kokkos::subview(p_ref, r), Kokkos::subview(g_ref, r),
                           Kokkos::subview(m_ref, r), Kokkos::subview(v_ref, r), lr, beta1, beta2,
                           eps, seg.weight_decay ? wd : 0.0, step);
        }
        CHECK(tt::bitwise_equal(tt::to_host(p), tt::to_host(p_ref)));
        CHECK(tt::bitwise_equal(tt::to_host(m), tt::to_host(m_ref)));
        CHECK(tt::bitwise_equal(tt::to_host(v), tt::to_host(v_ref)));
        CHECK(tt::bitwise_equal(tt::to_host(g), hg));  // the scale is folded in, not stored
      }
      // Decay on the segments that ask for it, and only there: a decayed and an undecayed
      // segment must both have moved differently from a run without weight decay.
      auto p_nodecay = tt::to_device<T>(hp);
      tk::Vector<T> m0("m0", n), v0("v0", n);
      const auto hg = tt::random_vec<T>(rng, n);
      auto g = tt::to_device<T>(hg);
      tk::bucket_adamw_update(exec, p_nodecay, g, m0, v0, table, lr, beta1, beta2, eps, 0.0, 1);
      auto p_decay = tt::to_device<T>(hp);
      tk::Vector<T> m1("m1", n), v1("v1", n);
      tk::bucket_adamw_update(exec, p_decay, g, m1, v1, table, lr, beta1, beta2, eps, wd, 1);
      const auto a = tt::to_host(p_nodecay), b = tt::to_host(p_decay);
      for (const tk::FlatSegment& seg : segments) {
        for (std::int64_t i = seg.begin; i < seg.end; ++i) {
          const auto k = static_cast<std::size_t>(i);
          CHECK((a[k] == b[k]) == !seg.weight_decay);
        }
      }
    }
  }
}

TEST_CASE("bucket_adamw_update with clip_scale 1 is the current per-parameter update",
          "[kernels][adamw]") {
  using T = float;
  using Exec = tptrain::kx::ExecSpace;
  Exec exec;
  // GPT-2 block shapes at a tenth of the width (not multiples of the chunk), default chunk.
  const std::int64_t H = 77, F = 4 * H;
  const std::int64_t lengths[] = {H, H, 3 * H * H, 3 * H, H * H, H, H, H, F * H, F, H * F, H};
  std::vector<tk::FlatSegment> segments;
  std::int64_t offset = 0;
  for (const std::int64_t len : lengths) {
    const bool matrix = len > F;
    segments.push_back({offset, offset + len, matrix, !matrix, true});
    offset += len;
  }
  const tk::FlatSegments<Exec> table(segments);
  std::mt19937 rng(7);
  const auto hp = tt::random_vec<T>(rng, offset);
  const auto hg = tt::random_vec<T>(rng, offset);
  auto p = tt::to_device<T>(hp), p_ref = tt::to_device<T>(hp);
  auto g = tt::to_device<T>(hg);
  tk::Vector<T> m("m", offset), v("v", offset), m_ref("m_ref", offset), v_ref("v_ref", offset);
  for (int step = 1; step <= 2; ++step) {
    tk::bucket_adamw_update(exec, p, g, m, v, table, 6e-4, 0.9, 0.95, 1e-8, 0.1, step);
    for (const tk::FlatSegment& seg : segments) {
      const auto r = std::make_pair(seg.begin, seg.end);
      tk::adamw_update(exec, Kokkos::subview(p_ref, r), Kokkos::subview(g, r),
                       Kokkos::subview(m_ref, r), Kokkos::subview(v_ref, r), 6e-4, 0.9, 0.95, 1e-8,
                       seg.weight_decay ? 0.1 : 0.0, step);
    }
  }
  CHECK(tt::bitwise_equal(tt::to_host(p), tt::to_host(p_ref)));
  CHECK(tt::bitwise_equal(tt::to_host(m), tt::to_host(m_ref)));
  CHECK(tt::bitwise_equal(tt::to_host(v), tt::to_host(v_ref)));
}

TEST_CASE("FlatSegments and bucket_adamw_update refuse bad tables and shapes", "[kernels][adamw]") {
  using T = float;
  using Exec = tptrain::kx::ExecSpace;
  Exec exec;
  using S = tk::FlatSegment;
  CHECK_THROWS_AS(tk::FlatSegments<Exec>({S{1, 4}}), std::invalid_argument);          // not at 0
  CHECK_THROWS_AS(tk::FlatSegments<Exec>({S{0, 4}, S{5, 6}}), std::invalid_argument);  // gap
  CHECK_THROWS_AS(tk::FlatSegments<Exec>({S{0, 4}, S{3, 6}}), std::invalid_argument);  // overlap
  CHECK_THROWS_AS(tk::FlatSegments<Exec>({S{0, 4}, S{4, 3}}), std::invalid_argument);  // reversed
  CHECK_THROWS_AS(tk::FlatSegments<Exec>({S{0, 4}}, 0), std::invalid_argument);       // chunk 0
  const tk::FlatSegments<Exec> empty({});
  CHECK(empty.size() == 0);
  CHECK(empty.chunks().extent(0) == 0);

  const tk::FlatSegments<Exec> table({S{0, 4}, S{4, 4}, S{4, 10}}, 3);
  CHECK(table.size() == 10);
  CHECK(table.chunks().extent(0) == 4);  // 4 → [0,3) [3,4); empty → none; 6 → [4,7) [7,10)
  tk::Vector<T> p("p", 10), g("g", 10), m("m", 10), v("v", 10), short_v("short", 9);
  CHECK_THROWS_AS(tk::bucket_adamw_update(exec, p, g, m, short_v, table, 1e-3, 0.9, 0.95, 1e-8,
                                          0.1, 1),
                  std::invalid_argument);
  CHECK_THROWS_AS(tk::bucket_adamw_update(exec, p, g, m, v, table, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0),
                  std::invalid_argument);
  // An empty bucket is a no-op.
  tk::Vector<T> none("none", 0);
  tk::bucket_adamw_update(exec, none, none, none, none, empty, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1);
}
