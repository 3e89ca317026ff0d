// bias_add / bias_backward against host loops; accumulation and bitwise determinism.
#include "catch.hpp"
#include "kokkos_kernels/bias.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

TEMPLATE_TEST_CASE("bias_add and bias_backward match host loops", "[kernels]", float, double) {
  using T = TestType;
  const auto [N, H] = GENERATE(std::make_pair(7, 13), std::make_pair(1, 1), std::make_pair(64, 32));
  INFO("N=" << N << " H=" << H);
  std::mt19937 rng(11);
  tptrain::kx::ExecSpace exec;
  const auto hy = tt::random_vec<T>(rng, N * H);
  const auto hb = tt::random_vec<T>(rng, H);
  const auto hdy = tt::random_vec<T>(rng, N * H);
  const auto hdb0 = tt::random_vec<T>(rng, H);
  auto y = tt::to_device<T>(hy, N, H);
  auto b = tt::to_device<T>(hb);
  auto dy = tt::to_device<T>(hdy, N, H);
  auto db = tt::to_device<T>(hdb0);
  tk::bias_add(exec, y, b);
  tk::bias_backward(exec, dy, db);
  exec.fence();

  tt::HostVec ref_y = hy, ref_db = hdb0;
  for (int t = 0; t < N; ++t)
    for (int j = 0; j < H; ++j) {
      ref_y[t * H + j] += hb[j];
      ref_db[j] += hdy[t * H + j];
    }
  CHECK(tt::max_rel_err(tt::to_host(y), ref_y, tt::max_abs(hy)) < tt::tol<T>());
  CHECK(tt::max_rel_err(tt::to_host(db), ref_db, tt::max_abs(hdb0)) < tt::tol<T>());

  // Deterministic: the same accumulation from the same start is bitwise identical.
  auto db2 = tt::to_device<T>(hdb0);
  tk::bias_backward(exec, dy, db2);
  exec.fence();
  CHECK(tt::bitwise_equal(tt::to_host(db), tt::to_host(db2)));
}
