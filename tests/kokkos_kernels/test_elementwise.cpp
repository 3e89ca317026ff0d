// Elementwise kernels on rank-1 and rank-2 views, including subviews and unmanaged views.
#include "catch.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

TEMPLATE_TEST_CASE("elementwise kernels on 2D views", "[kernels]", float, double) {
  using T = TestType;
  const int N = 7, H = 13;
  std::mt19937 rng(21);
  tptrain::kx::ExecSpace exec;
  const auto ha = tt::random_vec<T>(rng, N * H);
  const auto hb = tt::random_vec<T>(rng, N * H);
  auto a = tt::to_device<T>(ha, N, H);
  auto b = tt::to_device<T>(hb, N, H);
  tk::Matrix<T> out("out", N, H), c("c", N, H);

  tk::add(exec, a, b, out);
  tt::HostVec ref(N * H);
  for (int i = 0; i < N * H; ++i) ref[i] = ha[i] + hb[i];
  CHECK(tt::max_rel_err(tt::to_host(out), ref) < tt::tol<T>());

  tk::copy(exec, a, c);
  CHECK(tt::bitwise_equal(tt::to_host(c), ha));

  tk::add_inplace(exec, c, b);
  CHECK(tt::max_rel_err(tt::to_host(c), ref) < tt::tol<T>());

  tk::scale(exec, c, T(-0.5));
  for (auto& v : ref) v *= -0.5;
  CHECK(tt::max_rel_err(tt::to_host(c), ref) < tt::tol<T>());

  tk::fill(exec, c, T(3));
  CHECK(tt::bitwise_equal(tt::to_host(c), tt::HostVec(N * H, 3.0)));

  // A column block (LayoutStride subview) is handled element by element: only it changes.
  auto block = Kokkos::subview(out, Kokkos::make_pair(1, 4), Kokkos::make_pair(2, 7));
  tk::fill(exec, block, T(0));
  exec.fence();
  const auto hout = tt::to_host(out);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < H; ++j) {
      const bool inside = i >= 1 && i < 4 && j >= 2 && j < 7;
      CHECK(hout[i * H + j] ==
            (inside ? 0.0 : static_cast<double>(static_cast<T>(ha[i * H + j] + hb[i * H + j]))));
    }
}

TEMPLATE_TEST_CASE("elementwise kernels on 1D and unmanaged views", "[kernels]", float, double) {
  using T = TestType;
  const int n = 29;
  std::mt19937 rng(22);
  tptrain::kx::ExecSpace exec;
  const auto ha = tt::random_vec<T>(rng, n);
  const auto hb = tt::random_vec<T>(rng, n);
  auto a = tt::to_device<T>(ha);
  auto b = tt::to_device<T>(hb);
  tk::Vector<T> buf("buf", n);
  tk::VectorUnmanaged<T> out(buf.data(), n);
  tk::add(exec, a, b, out);
  tt::HostVec ref(n);
  for (int i = 0; i < n; ++i) ref[i] = ha[i] + hb[i];
  CHECK(tt::max_rel_err(tt::to_host(buf), ref) < tt::tol<T>());
  tk::add_inplace(exec, out, a);
  for (int i = 0; i < n; ++i) ref[i] += ha[i];
  CHECK(tt::max_rel_err(tt::to_host(buf), ref) < tt::tol<T>());
  tk::scale(exec, out, T(2));
  for (auto& v : ref) v *= 2;
  CHECK(tt::max_rel_err(tt::to_host(buf), ref) < tt::tol<T>());
  tk::copy(exec, b, out);
  CHECK(tt::bitwise_equal(tt::to_host(buf), hb));
  tk::fill(exec, out, T(-1));
  CHECK(tt::bitwise_equal(tt::to_host(buf), tt::HostVec(n, -1.0)));
}

TEST_CASE("elementwise kernels reject mismatched extents", "[kernels]") {
  tptrain::kx::ExecSpace exec;
  tk::Matrix<float> a("a", 3, 4), b("b", 4, 3);
  CHECK_THROWS_AS(tk::add_inplace(exec, a, b), std::invalid_argument);
}
