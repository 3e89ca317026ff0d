// LayerNorm forward/backward against host loops, finite differences (double), accumulation of
// dgamma/dbeta, bitwise determinism; the fused residual add + LayerNorm forward.
#include "catch.hpp"
#include "kokkos_kernels/layernorm.hpp"
#include "reference.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

TEMPLATE_TEST_CASE("layernorm forward/backward match host reference", "[kernels]", float, double) {
  using T = TestType;
  const auto [N, H] =
      GENERATE(std::make_pair(7, 13), std::make_pair(1, 2), std::make_pair(32, 256));
  INFO("N=" << N << " H=" << H);
  const double eps = 1e-5;
  std::mt19937 rng(41);
  tptrain::kx::ExecSpace exec;
  const auto hx = tt::random_vec<T>(rng, N * H, -2.0, 3.0);
  const auto hg = tt::random_vec<T>(rng, H, 0.5, 1.5);
  const auto hb = tt::random_vec<T>(rng, H);
  const auto hdy = tt::random_vec<T>(rng, N * H);
  const auto hdg0 = tt::random_vec<T>(rng, H);
  const auto hdb0 = tt::random_vec<T>(rng, H);
  auto x = tt::to_device<T>(hx, N, H);
  auto g = tt::to_device<T>(hg);
  auto b = tt::to_device<T>(hb);
  auto dy = tt::to_device<T>(hdy, N, H);
  tk::Matrix<T> y("y", N, H), dx("dx", N, H);
  tk::Vector<T> mean("mean", N), rstd("rstd", N);
  auto dg = tt::to_device<T>(hdg0);
  auto db = tt::to_device<T>(hdb0);

  tk::layernorm_forward(exec, x, g, b, y, mean, rstd, T(eps));
  tk::layernorm_backward(exec, dy, x, g, mean, rstd, dx, dg, db);
  exec.fence();

  const auto rf = tk::ref::layernorm_forward(hx, hg, hb, N, H, eps);
  const auto rb = tk::ref::layernorm_backward(hdy, hx, hg, N, H, eps);
  CHECK(tt::max_rel_err(tt::to_host(y), rf.y) < tt::tol<T>());
  CHECK(tt::max_rel_err(tt::to_host(mean), rf.mean) < tt::tol<T>());
  CHECK(tt::max_rel_err(tt::to_host(rstd), rf.rstd) < tt::tol<T>());
  // dx = rstd (g - mean(g) - x̂ mean(g x̂)) cancels (exactly, for H = 2): measure the error
  // against the size of the terms, rstd · |dy γ|.
  double dx_scale = 0;
  for (int t = 0; t < N; ++t)
    for (int j = 0; j < H; ++j)
      dx_scale = std::max(dx_scale, rf.rstd[t] * std::fabs(hdy[t * H + j] * hg[j]));
  CHECK(tt::max_rel_err(tt::to_host(dx), rb.dx, dx_scale) < tt::tol<T>());
  tt::HostVec ref_dg = hdg0, ref_db = hdb0;
  for (int j = 0; j < H; ++j) {
    ref_dg[j] += rb.dgamma[j];
    ref_db[j] += rb.dbeta[j];
  }
  CHECK(tt::max_rel_err(tt::to_host(dg), ref_dg, tt::max_abs(hdg0)) < tt::tol<T>());
  CHECK(tt::max_rel_err(tt::to_host(db), ref_db, tt::max_abs(hdb0)) < tt::tol<T>());

  // Determinism: the same backward again, from the same start, is bitwise identical.
  tk::Matrix<T> dx2("dx2", N, H);
  auto dg2 = tt::to_device<T>(hdg0);
  auto db2 = tt::to_device<T>(hdb0);
  tk::layernorm_backward(exec, dy, x, g, mean, rstd, dx2, dg2, db2);
  exec.fence();
  CHECK(tt::bitwise_equal(tt::to_host(dx), tt::to_host(dx2)));
  CHECK(tt::bitwise_equal(tt::to_host(dg), tt::to_host(dg2)));
  CHECK(tt::bitwise_equal(tt::to_host(db), tt::to_host(db2)));
}

TEST_CASE("layernorm backward matches finite differences (double)", "[kernels]") {
  using T = double;
  const int N = 3, H = 5;
  const double eps = 1e-5;
  std::mt19937 rng(42);
  tptrain::kx::ExecSpace exec;
  const auto hx = tt::random_vec<T>(rng, N * H, -2.0, 2.0);
  const auto hg = tt::random_vec<T>(rng, H, 0.5, 1.5);
  const auto hb = tt::random_vec<T>(rng, H);
  const auto hw = tt::random_vec<T>(rng, N * H);  // L = Σ w ⊙ y
  auto loss = [&](const tt::HostVec& xv, const tt::HostVec& gv, const tt::HostVec& bv) {
    auto x = tt::to_device<T>(xv, N, H);
    auto g = tt::to_device<T>(gv);
    auto b = tt::to_device<T>(bv);
    tk::Matrix<T> y("y", N, H);
    tk::Vector<T> mean("mean", N), rstd("rstd", N);
    tk::layernorm_forward(exec, x, g, b, y, mean, rstd, eps);
    return tt::dot(hw, tt::to_host(y));
  };
  auto x = tt::to_device<T>(hx, N, H);
  auto g = tt::to_device<T>(hg);
  auto b = tt::to_device<T>(hb);
  auto w = tt::to_device<T>(hw, N, H);
  tk::Matrix<T> y("y", N, H), dx("dx", N, H);
  tk::Vector<T> mean("mean", N), rstd("rstd", N), dg("dg", H), db("db", H);
  tk::layernorm_forward(exec, x, g, b, y, mean, rstd, eps);
  tk::layernorm_backward(exec, w, x, g, mean, rstd, dx, dg, db);

  const auto fd_dx = tt::fd_gradient([&](const tt::HostVec& v) { return loss(v, hg, hb); }, hx);
  const auto fd_dg = tt::fd_gradient([&](const tt::HostVec& v) { return loss(hx, v, hb); }, hg);
  const auto fd_db = tt::fd_gradient([&](const tt::HostVec& v) { return loss(hx, hg, v); }, hb);
  CHECK(tt::max_rel_err(tt::to_host(dx), fd_dx) < tt::fd_tol);
  CHECK(tt::max_rel_err(tt::to_host(dg), fd_dg) < tt::fd_tol);
  CHECK(tt::max_rel_err(tt::to_host(db), fd_db) < tt::fd_tol);
}

TEST_CASE("layernorm backward may run in place (dx aliases dy)", "[kernels]") {
  using T = double;
  const int N = 4, H = 6;
  std::mt19937 rng(43);
  tptrain::kx::ExecSpace exec;
  const auto hx = tt::random_vec<T>(rng, N * H);
  const auto hg = tt::random_vec<T>(rng, H);
  const auto hdy = tt::random_vec<T>(rng, N * H);
  auto x = tt::to_device<T>(hx, N, H);
  auto g = tt::to_device<T>(hg);
  auto dy = tt::to_device<T>(hdy, N, H);
  tk::Matrix<T> y("y", N, H), dx("dx", N, H);
  tk::Vector<T> mean("mean", N), rstd("rstd", N), dg("dg", H), db("db", H), dg2("dg2", H),
      db2("db2", H);
  tk::layernorm_forward(exec, x, g, g, y, mean, rstd, 1e-5);
  tk::layernorm_backward(exec, dy, x, g, mean, rstd, dx, dg, db);
  tk::layernorm_backward(exec, dy, x, g, mean, rstd, dy, dg2, db2);  // in place
  exec.fence();
  CHECK(tt::bitwise_equal(tt::to_host(dy), tt::to_host(dx)));
  CHECK(tt::bitwise_equal(tt::to_host(dg), tt::to_host(dg2)));
  CHECK(tt::bitwise_equal(tt::to_host(db), tt::to_host(db2)));
}

TEMPLATE_TEST_CASE("add_layernorm_forward is the residual add, then layernorm_forward (bitwise)",
                   "[kernels]", float, double) {
  using T = TestType;
  const auto [N, H] = GENERATE(std::make_pair(7, 13), std::make_pair(1, 1), std::make_pair(33, 256));
  INFO("N=" << N << " H=" << H);
  const double eps = 1e-5;
  std::mt19937 rng(44);
  tptrain::kx::ExecSpace exec;
  const auto hx = tt::random_vec<T>(rng, N * H, -2.0, 3.0);
  const auto hr = tt::random_vec<T>(rng, N * H);
  const auto hg = tt::random_vec<T>(rng, H, 0.5, 1.5);
  const auto hb = tt::random_vec<T>(rng, H);
  auto x = tt::to_device<T>(hx, N, H);
  auto r = tt::to_device<T>(hr, N, H);
  auto g = tt::to_device<T>(hg);
  auto b = tt::to_device<T>(hb);
  tk::Matrix<T> x1("x1", N, H), y("y", N, H), y_ref("y_ref", N, H);
  tk::Vector<T> mean("mean", N), rstd("rstd", N), mean_ref("mean_ref", N), rstd_ref("rstd_ref", N);
  tk::add_layernorm_forward(exec, x, r, x1, g, b, y, mean, rstd, T(eps));
  tk::layernorm_forward(exec, x1, g, b, y_ref, mean_ref, rstd_ref, T(eps));

  tt::HostVec sum(N * H);  // x + r rounded to T, as the kernel stores it
  for (int i = 0; i < N * H; ++i)
    sum[i] = static_cast<double>(static_cast<T>(static_cast<T>(hx[i]) + static_cast<T>(hr[i])));
  CHECK(tt::bitwise_equal(tt::to_host(x1), sum));
  CHECK(tt::bitwise_equal(tt::to_host(y), tt::to_host(y_ref)));
  CHECK(tt::bitwise_equal(tt::to_host(mean), tt::to_host(mean_ref)));
  CHECK(tt::bitwise_equal(tt::to_host(rstd), tt::to_host(rstd_ref)));
  const auto rf = tk::ref::layernorm_forward(sum, hg, hb, N, H, eps);
  CHECK(tt::max_rel_err(tt::to_host(y), rf.y) < tt::tol<T>());
  CHECK(tt::max_rel_err(tt::to_host(rstd), rf.rstd) < tt::tol<T>());

  // In place: the residual stream x becomes x + r.
  tk::Matrix<T> y2("y2", N, H);
  tk::add_layernorm_forward(exec, x, r, x, g, b, y2, mean, rstd, T(eps));
  CHECK(tt::bitwise_equal(tt::to_host(x), sum));
  CHECK(tt::bitwise_equal(tt::to_host(y2), tt::to_host(y_ref)));

  tk::Matrix<T> wrong("wrong", N + 1, H);
  CHECK_THROWS_AS(tk::add_layernorm_forward(exec, x, r, wrong, g, b, y, mean, rstd, T(eps)),
                  std::invalid_argument);
}
