// AdamW against values worked out by hand (40-digit decimal arithmetic) for two steps, and
// flat_view over 2D parameters.
#include "catch.hpp"
#include "kokkos_kernels/adamw.hpp"
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

  Kokkos::DefaultExecutionSpace exec;
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
  Kokkos::DefaultExecutionSpace exec;
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
