// GELU (tanh approximation) against host loops and central finite differences; the fused
// bias + GELU forward against the two kernels it replaces.
#include "catch.hpp"
#include "kokkos_kernels/bias.hpp"
#include "kokkos_kernels/gelu.hpp"
#include "reference.hpp"
#include "test_util.hpp"
#include "unfused_gelu.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

TEMPLATE_TEST_CASE("gelu forward/backward match host reference", "[kernels]", float, double) {
  using T = TestType;
  const auto [N, F] = GENERATE(std::make_pair(7, 13), std::make_pair(16, 64));
  std::mt19937 rng(31);
  tptrain::kx::ExecSpace exec;
  const auto hx = tt::random_vec<T>(rng, N * F, -4.0, 4.0);
  const auto hdy = tt::random_vec<T>(rng, N * F);
  auto x = tt::to_device<T>(hx, N, F);
  auto dy = tt::to_device<T>(hdy, N, F);
  tk::Matrix<T> y("y", N, F), dx("dx", N, F);
  tt::gelu_forward(exec, x, y);
  tt::gelu_backward(exec, dy, x, dx);
  exec.fence();
  tt::HostVec ref_y(N * F), ref_dx(N * F);
  for (int i = 0; i < N * F; ++i) {
    ref_y[i] = tk::ref::gelu(hx[i]);
    ref_dx[i] = hdy[i] * tk::ref::gelu_grad(hx[i]);
  }
  CHECK(tt::max_rel_err(tt::to_host(y), ref_y) < tt::tol<T>());
  // Also entry by entry: the negative tail (y ~ -1e-4 at x = -4) keeps its relative precision.
  CHECK(tt::max_elementwise_rel_err(tt::to_host(y), ref_y) < tt::tol<T>());
  CHECK(tt::max_rel_err(tt::to_host(dx), ref_dx) < tt::tol<T>());
}

TEST_CASE("gelu saturates without NaN far in the tails", "[kernels]") {
  using T = float;
  tptrain::kx::ExecSpace exec;
  const tt::HostVec hx{-1e4, -200.0, -60.0, 0.0, 60.0, 200.0, 1e4};
  const int n = static_cast<int>(hx.size());
  auto x = tt::to_device<T>(hx, 1, n);
  tk::Matrix<T> y("y", 1, n), dx("dx", 1, n);
  tt::gelu_forward(exec, x, y);
  tt::gelu_backward(exec, tt::to_device<T>(tt::HostVec(n, 1.0), 1, n), x, dx);
  const auto hy = tt::to_host(y), hdx = tt::to_host(dx);
  for (int i = 0; i < n; ++i) {
    INFO("x = " << hx[i]);
    CHECK(hy[i] == (hx[i] > 0 ? hx[i] : 0.0));
    CHECK(hdx[i] == (hx[i] > 0 ? 1.0 : (hx[i] < 0 ? 0.0 : 0.5)));
  }
}

TEST_CASE("gelu backward matches finite differences (double)", "[kernels]") {
  using T = double;
  const int N = 3, F = 5;
  std::mt19937 rng(32);
  tptrain::kx::ExecSpace exec;
  const auto hx = tt::random_vec<T>(rng, N * F, -3.0, 3.0);
  const auto hw = tt::random_vec<T>(rng, N * F);
  auto loss = [&](const tt::HostVec& xv) {
    auto x = tt::to_device<T>(xv, N, F);
    tk::Matrix<T> y("y", N, F);
    tt::gelu_forward(exec, x, y);
    return tt::dot(hw, tt::to_host(y));
  };
  auto x = tt::to_device<T>(hx, N, F);
  auto w = tt::to_device<T>(hw, N, F);
  tk::Matrix<T> dx("dx", N, F);
  tt::gelu_backward(exec, w, x, dx);
  CHECK(tt::max_rel_err(tt::to_host(dx), tt::fd_gradient(loss, hx)) < tt::fd_tol);
}

TEMPLATE_TEST_CASE("bias_gelu_forward is bias_add, then gelu_forward (bitwise)", "[kernels]", float,
                   double) {
  using T = TestType;
  const auto [N, F] = GENERATE(std::make_pair(7, 13), std::make_pair(16, 64));
  std::mt19937 rng(33);
  tptrain::kx::ExecSpace exec;
  const auto hh = tt::random_vec<T>(rng, N * F, -4.0, 4.0);
  const auto hb = tt::random_vec<T>(rng, F);
  auto h = tt::to_device<T>(hh, N, F);
  auto h_ref = tt::to_device<T>(hh, N, F);
  auto b = tt::to_device<T>(hb);
  tk::Matrix<T> a("a", N, F), a_ref("a_ref", N, F), sig("sig", N, F);
  tk::bias_gelu_forward(exec, h, b, a, sig);
  tk::bias_add(exec, h_ref, b);
  tt::gelu_forward(exec, h_ref, a_ref);
  CHECK(tt::bitwise_equal(tt::to_host(h), tt::to_host(h_ref)));
  CHECK(tt::bitwise_equal(tt::to_host(a), tt::to_host(a_ref)));
  tt::HostVec ref_h(N * F), ref_a(N * F);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < F; ++j) {
      ref_h[i * F + j] = static_cast<double>(static_cast<T>(hh[i * F + j]) + static_cast<T>(hb[j]));
      ref_a[i * F + j] = tk::ref::gelu(ref_h[i * F + j]);
    }
  CHECK(tt::max_rel_err(tt::to_host(h), ref_h) < tt::tol<T>());
  CHECK(tt::max_rel_err(tt::to_host(a), ref_a) < tt::tol<T>());
  CHECK_THROWS_AS(tk::bias_gelu_forward(exec, h, tt::to_device<T>(tt::HostVec(F + 1, 0.0)), a, sig),
                  std::invalid_argument);
}

TEMPLATE_TEST_CASE("GELU through the saved sigmoid equals the GELU kernels (bitwise) and the reference",
                   "[kernels]", float, double) {
  using T = TestType;
  const auto [N, F] = GENERATE(std::make_pair(7, 13), std::make_pair(16, 64));
  std::mt19937 rng(35);
  tptrain::kx::ExecSpace exec;
  const auto hh = tt::random_vec<T>(rng, N * F, -12.0, 6.0);  // the far negative tail too
  const auto hb = tt::random_vec<T>(rng, F);
  const auto hdy = tt::random_vec<T>(rng, N * F);
  auto h = tt::to_device<T>(hh, N, F);
  auto h_ref = tt::to_device<T>(hh, N, F);
  auto b = tt::to_device<T>(hb);
  auto dy = tt::to_device<T>(hdy, N, F);
  tk::Matrix<T> a("a", N, F), sig("sig", N, F), a_again("a_again", N, F), dx("dx", N, F);
  tk::Matrix<T> a_ref("a_ref", N, F), dx_ref("dx_ref", N, F);
  tk::bias_gelu_forward(exec, h, b, a, sig);
  tk::gelu_from_sigmoid(exec, h, sig, a_again);
  tk::gelu_backward_from_sigmoid(exec, dy, h, sig, dx);
  tk::bias_add(exec, h_ref, b);
  tt::gelu_forward(exec, h_ref, a_ref);
  tt::gelu_backward(exec, dy, h_ref, dx_ref);
  CHECK(tt::bitwise_equal(tt::to_host(h), tt::to_host(h_ref)));
  CHECK(tt::bitwise_equal(tt::to_host(a), tt::to_host(a_ref)));
  CHECK(tt::bitwise_equal(tt::to_host(a_again), tt::to_host(a_ref)));
  CHECK(tt::bitwise_equal(tt::to_host(dx), tt::to_host(dx_ref)));
  tt::HostVec ref_dx(N * F);
  const auto hv = tt::to_host(h);
  for (int i = 0; i < N * F; ++i) ref_dx[i] = hdy[i] * tk::ref::gelu_grad(hv[i]);
  CHECK(tt::max_rel_err(tt::to_host(dx), ref_dx) < tt::tol<T>());
  // In place (dx aliasing dy), as the MLP runs it.
  tk::gelu_backward_from_sigmoid(exec, dy, h, sig, dy);
  CHECK(tt::bitwise_equal(tt::to_host(dy), tt::to_host(dx_ref)));
  CHECK_THROWS_AS(tk::gelu_from_sigmoid(exec, h, tk::Matrix<T>("bad", N, F + 1), a_again), std::invalid_argument);
}
