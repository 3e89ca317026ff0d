// The fused kernels of a transformer block's launch budget (issue 22) against naive double
// references: bias + residual add, bias + residual add + LayerNorm, LayerNorm backward + the
// residual path, GELU backward + the fc bias gradient. Each also equals, bit for bit, the unfused
// kernels it replaces (the model's gradients do not change).
#include <random>

#include "catch.hpp"
#include "kokkos_kernels/bias.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "kokkos_kernels/gelu.hpp"
#include "kokkos_kernels/layernorm.hpp"
#include "reference.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

namespace {
using Exec = tptrain::kx::ExecSpace;
}

TEMPLATE_TEST_CASE("bias_residual_add is x + (r + b)", "[kernels][fused]", float, double, tptrain::kx::bf16) {
  using T = TestType;
  const int N = 70, H = 9;
  std::mt19937 rng(3);
  const auto hx = tt::random_vec<T>(rng, N * H), hr = tt::random_vec<T>(rng, N * H), hb = tt::random_vec<T>(rng, H);
  auto x = tt::to_device<T>(hx, N, H), r = tt::to_device<T>(hr, N, H);
  auto b = tt::to_device<T>(hb);
  tk::Matrix<T> y("y", N, H), unfused("unfused", N, H);
  Exec exec;
  tk::bias_residual_add(exec, x, r, b, y);
  Kokkos::deep_copy(unfused, r);
  tk::bias_add(exec, unfused, b);
  tk::add(exec, x, unfused, unfused);
  exec.fence();
  tt::HostVec want(hx.size());
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < H; ++j) want[i * H + j] = hx[i * H + j] + hr[i * H + j] + hb[j];
  const double f = tptrain::kx::is_half_v<T> ? 2 : 1;
  CHECK(tt::max_rel_err(tt::to_host(y), want) < f * tt::tol<T>());
  CHECK(tt::bitwise_equal(tt::to_host(y), tt::to_host(unfused)));
}

TEMPLATE_TEST_CASE("add_bias_layernorm_forward is LayerNorm(x + r + b)", "[kernels][fused]", float, double) {
  using T = TestType;
  const int N = 6, H = 40;
  std::mt19937 rng(4);
  const auto hx = tt::random_vec<T>(rng, N * H), hr = tt::random_vec<T>(rng, N * H), hrb = tt::random_vec<T>(rng, H);
  const auto hg = tt::random_vec<T>(rng, H, 0.5, 1.5), hbeta = tt::random_vec<T>(rng, H);
  auto x = tt::to_device<T>(hx, N, H), r = tt::to_device<T>(hr, N, H);
  auto rb = tt::to_device<T>(hrb), g = tt::to_device<T>(hg), beta = tt::to_device<T>(hbeta);
  tk::Matrix<T> x1("x1", N, H), y("y", N, H), x1u("x1u", N, H), yu("yu", N, H), ru("ru", N, H);
  tk::Vector<T> mean("mean", N), rstd("rstd", N), meanu("meanu", N), rstdu("rstdu", N);
  Exec exec;
  tk::add_bias_layernorm_forward(exec, x, r, rb, x1, g, beta, y, mean, rstd, T(1e-5));
  Kokkos::deep_copy(ru, r);
  tk::bias_add(exec, ru, rb);
  tk::add_layernorm_forward(exec, x, ru, x1u, g, beta, yu, meanu, rstdu, T(1e-5));
  exec.fence();
  tt::HostVec sum(hx.size());
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < H; ++j) sum[i * H + j] = hx[i * H + j] + hr[i * H + j] + hrb[j];
  const auto ref = tk::ref::layernorm_forward(sum, hg, hbeta, N, H, 1e-5);
  CHECK(tt::max_rel_err(tt::to_host(x1), sum) < tt::tol<T>());
  CHECK(tt::max_rel_err(tt::to_host(y), ref.y) < 10 * tt::tol<T>());
  CHECK(tt::bitwise_equal(tt::to_host(y), tt::to_host(yu)));
  CHECK(tt::bitwise_equal(tt::to_host(x1), tt::to_host(x1u)));
}

TEMPLATE_TEST_CASE("layernorm_backward_add adds the residual path", "[kernels][fused]", float, double) {
  using T = TestType;
  const int N = 130, H = 24;  // N > 64: the two-stage column sums
  std::mt19937 rng(6);
  const auto hdy = tt::random_vec<T>(rng, N * H), hx = tt::random_vec<T>(rng, N * H, -2, 2);
  const auto hres = tt::random_vec<T>(rng, N * H), hg = tt::random_vec<T>(rng, H, 0.5, 1.5);
  auto dy = tt::to_device<T>(hdy, N, H), x = tt::to_device<T>(hx, N, H), res = tt::to_device<T>(hres, N, H);
  auto g = tt::to_device<T>(hg);
  tk::Vector<T> mean("mean", N), rstd("rstd", N);
  tk::Matrix<T> y("y", N, H), dx("dx", N, H), dxu("dxu", N, H);
  tk::Vector<T> dg("dg", H), db("db", H), dgu("dgu", H), dbu("dbu", H);
  tk::Vector<T> ws("ws", tk::column_sums_workspace_size(N, H, 2));
  Exec exec;
  tk::layernorm_forward(exec, x, g, tk::Vector<T>("beta", H), y, mean, rstd, T(1e-5));
  tk::layernorm_backward_add(exec, dy, x, g, mean, rstd, res, dx, dg, db, ws);
  tk::layernorm_backward(exec, dy, x, g, mean, rstd, dxu, dgu, dbu, ws);
  tk::add(exec, dxu, res, dxu);
  exec.fence();
  const auto ref = tk::ref::layernorm_backward(hdy, hx, hg, N, H, 1e-5);
  tt::HostVec want = ref.dx;
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += hres[i];
  CHECK(tt::max_rel_err(tt::to_host(dx), want) < 20 * tt::tol<T>());
  CHECK(tt::max_rel_err(tt::to_host(dg), ref.dgamma) < 20 * tt::tol<T>());
  CHECK(tt::bitwise_equal(tt::to_host(dx), tt::to_host(dxu)));
  CHECK(tt::bitwise_equal(tt::to_host(dg), tt::to_host(dgu)));
  CHECK(tt::bitwise_equal(tt::to_host(db), tt::to_host(dbu)));
}

TEMPLATE_TEST_CASE("gelu_backward_bias_grad is the GELU backward and its bias gradient", "[kernels][fused]", float,
                   double, tptrain::kx::bf16) {
  using T = TestType;
  using A = tptrain::kx::acc_t<T>;
  const int N = 150, F = 11;  // N > 64: the two-stage column sums
  std::mt19937 rng(8);
  const auto hh = tt::random_vec<T>(rng, N * F, -3, 3), hda = tt::random_vec<T>(rng, N * F);
  auto h = tt::to_device<T>(hh, N, F), da = tt::to_device<T>(hda, N, F), da_u = tt::to_device<T>(hda, N, F);
  tk::Matrix<T> a("a", N, F), sig("sig", N, F);
  Exec exec;
  tk::bias_gelu_forward(exec, h, tk::Vector<T>("zero_bias", F), a, sig);  // sig of h (bias 0)
  tk::Vector<A> db = tt::to_device<A>(tt::random_vec<A>(rng, F)), db_u("db_u", F);
  Kokkos::deep_copy(db_u, db);
  const auto hdb0 = tt::to_host(db);
  tk::Vector<A> ws("ws", tk::column_sums_workspace_size(N, F));
  tk::gelu_backward_bias_grad(exec, da, h, sig, da, db, ws);  // in place, as the MLP calls it
  tk::gelu_backward_from_sigmoid(exec, da_u, h, sig, da_u);
  tk::bias_backward(exec, da_u, db_u, ws);
  exec.fence();
  tt::HostVec want(hh.size()), want_db = hdb0;
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < F; ++j) {
      want[i * F + j] = hda[i * F + j] * tk::ref::gelu_grad(hh[i * F + j]);
      want_db[j] += want[i * F + j];
    }
  const double f = tptrain::kx::is_half_v<T> ? 4 : 10;
  CHECK(tt::max_rel_err(tt::to_host(da), want) < f * tt::tol<T>());
  CHECK(tt::max_rel_err(tt::to_host(db), want_db) < f * tt::tol<T>());
  CHECK(tt::bitwise_equal(tt::to_host(da), tt::to_host(da_u)));
  CHECK(tt::bitwise_equal(tt::to_host(db), tt::to_host(db_u)));
}
