// The column-sum kernels block columns per thread on host backends (CB = 64) and use one
// column per thread on GPUs (CB = 1). Both orderings must give bitwise identical results;
// running CB = 1 here exercises the GPU loop structure on the host.
#include "catch.hpp"
#include "kokkos_kernels/bias.hpp"
#include "kokkos_kernels/embedding.hpp"
#include "kokkos_kernels/layernorm.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

using Exec = tptrain::kx::ExecSpace;

TEST_CASE("column blocking does not change results (bitwise)", "[kernels]") {
  using T = float;
  using M = tk::Matrix<T>;
  using V = tk::Vector<T>;
  Exec exec;
  std::mt19937 rng(101);
  const int N = 37, H = 150;  // H > 64 with a remainder: full and partial blocks

  SECTION("bias_backward, layernorm_backward, embedding_backward_masked") {
    auto dy = tt::to_device<T>(tt::random_vec<T>(rng, N * H), N, H);
    auto x = tt::to_device<T>(tt::random_vec<T>(rng, N * H), N, H);
    auto g = tt::to_device<T>(tt::random_vec<T>(rng, H));
    V db1("db1", H), db2("db2", H);
    tk::bias_backward<Exec, M, V, 1>(exec, dy, db1);
    tk::bias_backward(exec, dy, db2);
    CHECK(tt::bitwise_equal(tt::to_host(db1), tt::to_host(db2)));

    M y("y", N, H), dx1("dx1", N, H), dx2("dx2", N, H);
    V mean("mean", N), rstd("rstd", N), dg1("dg1", H), dg2("dg2", H), dbt1("dbt1", H),
        dbt2("dbt2", H);
    tk::layernorm_forward(exec, x, g, g, y, mean, rstd, T(1e-5));
    tk::layernorm_backward<Exec, M, M, V, V, V, M, V, V, 1>(exec, dy, x, g, mean, rstd, dx1, dg1,
                                                            dbt1);
    tk::layernorm_backward(exec, dy, x, g, mean, rstd, dx2, dg2, dbt2);
    CHECK(tt::bitwise_equal(tt::to_host(dx1), tt::to_host(dx2)));
    CHECK(tt::bitwise_equal(tt::to_host(dg1), tt::to_host(dg2)));
    CHECK(tt::bitwise_equal(tt::to_host(dbt1), tt::to_host(dbt2)));

    // Token segments: one team per distinct id, threads over column blocks.
    std::vector<int> htok(N);
    for (int t = 0; t < N; ++t) htok[t] = (t * 7) % 11;
    tk::TokenSegments seg;
    seg.build(exec, htok.data(), N);
    M ds1("ds1", 11, H), ds2("ds2", 11, H);
    tk::embedding_backward_masked<Exec, M, M, 1>(exec, seg, dy, 0, ds1);
    tk::embedding_backward_masked(exec, seg, dy, 0, ds2);
    CHECK(tt::bitwise_equal(tt::to_host(ds1), tt::to_host(ds2)));
  }

  SECTION("two-stage column sums over several chunks, caller workspace") {
    const int Nc = 200;  // 4 chunks, the last partial
    auto dyc = tt::to_device<T>(tt::random_vec<T>(rng, Nc * H), Nc, H);
    auto xc = tt::to_device<T>(tt::random_vec<T>(rng, Nc * H), Nc, H);
    auto g = tt::to_device<T>(tt::random_vec<T>(rng, H));
    V ws("ws", static_cast<std::size_t>(tk::column_sums_workspace_size(Nc, H, 2)));
    V db1("db1", H), db2("db2", H);
    tk::bias_backward<Exec, M, V, V, 1>(exec, dyc, db1, ws);
    tk::bias_backward(exec, dyc, db2, ws);
    CHECK(tt::bitwise_equal(tt::to_host(db1), tt::to_host(db2)));

    M y("y", Nc, H), dx1("dx1", Nc, H), dx2("dx2", Nc, H);
    V mean("mean", Nc), rstd("rstd", Nc), dg1("dg1", H), dg2("dg2", H), dbt1("dbt1", H),
        dbt2("dbt2", H);
    tk::layernorm_forward(exec, xc, g, g, y, mean, rstd, T(1e-5));
    tk::layernorm_backward<Exec, M, M, V, V, V, M, V, V, V, 1>(exec, dyc, xc, g, mean, rstd, dx1,
                                                               dg1, dbt1, ws);
    tk::layernorm_backward(exec, dyc, xc, g, mean, rstd, dx2, dg2, dbt2, ws);
    CHECK(tt::bitwise_equal(tt::to_host(dg1), tt::to_host(dg2)));
    CHECK(tt::bitwise_equal(tt::to_host(dbt1), tt::to_host(dbt2)));
  }
}
