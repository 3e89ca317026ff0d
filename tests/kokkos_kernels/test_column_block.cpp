// The column-sum and attention kernels block columns per thread on host backends (CB = 64) and
// use one column per thread on GPUs (CB = 1). Both orderings must give bitwise identical results;
// running CB = 1 here exercises the GPU loop structure on the host.
#include "catch.hpp"
#include "kokkos_kernels/attention.hpp"
#include "kokkos_kernels/bias.hpp"
#include "kokkos_kernels/embedding.hpp"
#include "kokkos_kernels/layernorm.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

using Exec = Kokkos::DefaultExecutionSpace;

TEST_CASE("column blocking does not change results (bitwise)", "[kernels]") {
  using T = float;
  using M = tk::Matrix<T>;
  using V = tk::Vector<T>;
  using A = tk::Tensor4<T>;
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

    std::vector<int> htok(N);
    for (int t = 0; t < N; ++t) htok[t] = (t * 7) % 11;
    auto tok = tt::tokens_to_device(htok);
    M dw1("dw1", 11, H), dw2("dw2", 11, H);
    tk::embedding_backward_masked<Exec, tk::Tokens, M, M, 1>(exec, tok, dy, 0, dw1);
    tk::embedding_backward_masked(exec, tok, dy, 0, dw2);
    CHECK(tt::bitwise_equal(tt::to_host(dw1), tt::to_host(dw2)));
  }

  SECTION("attention forward and backward") {
    const int B = 2, S = 9, nh = 2, d = 70, Hl = nh * d;  // d > 64: two column blocks
    auto qkv = tt::to_device<T>(tt::random_vec<T>(rng, B * S * 3 * Hl), B * S, 3 * Hl);
    auto dout = tt::to_device<T>(tt::random_vec<T>(rng, B * S * Hl), B * S, Hl);
    M o1("o1", B * S, Hl), o2("o2", B * S, Hl), dq1("dq1", B * S, 3 * Hl),
        dq2("dq2", B * S, 3 * Hl);
    A a1("a1", B, nh, S, S), a2("a2", B, nh, S, S), w1("w1", B, nh, S, S), w2("w2", B, nh, S, S);
    tk::attention_forward<Exec, M, M, A, 1>(exec, qkv, o1, a1, B, S, nh, d);
    tk::attention_forward(exec, qkv, o2, a2, B, S, nh, d);
    CHECK(tt::bitwise_equal(tt::to_host(o1), tt::to_host(o2)));
    CHECK(tt::bitwise_equal(tt::to_host(a1), tt::to_host(a2)));
    tk::attention_backward<Exec, M, M, A, M, A, 1>(exec, dout, qkv, a1, dq1, w1);
    tk::attention_backward(exec, dout, qkv, a2, dq2, w2);
    CHECK(tt::bitwise_equal(tt::to_host(dq1), tt::to_host(dq2)));
  }
}
