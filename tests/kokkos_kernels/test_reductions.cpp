// squared_norm (accumulated in double) and all_finite on 1D and 2D views.
#include <limits>

#include "catch.hpp"
#include "kokkos_kernels/reductions.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

TEMPLATE_TEST_CASE("squared_norm and all_finite", "[kernels]", float, double) {
  using T = TestType;
  const int N = 7, H = 13;
  std::mt19937 rng(91);
  Kokkos::DefaultExecutionSpace exec;
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
