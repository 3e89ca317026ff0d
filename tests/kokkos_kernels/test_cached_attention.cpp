// The cached attention kernels (kokkos_kernels/cached_attention.hpp) against the naive causal
// attention of reference.hpp: rows fed in blocks as generation feeds them (a prefill, single
// rows, another block) give every row's output of the whole-sequence reference.
#include <limits>
#include <random>
#include <vector>

#include "catch.hpp"
#include "kokkos_kernels/cached_attention.hpp"
#include "reference.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

TEMPLATE_TEST_CASE("cached attention over blocks of rows matches the naive causal attention", "[kernels][kv_cache]",
                   float, double, tptrain::kx::bf16) {
  using T = TestType;
  using Cache = Kokkos::View<T***, Kokkos::LayoutRight, tptrain::kx::MemSpace>;
  tptrain::kx::ExecSpace exec;
  // S = 131 crosses 128; the cache holds more positions (P) than the sequence uses.
  const int S = 131, nh = 3, d = 5, Hl = nh * d, P = 140;
  std::mt19937 rng(12);
  const auto hqkv = tt::random_vec<T>(rng, static_cast<std::size_t>(S) * 3 * Hl, -1.5, 1.5);
  const auto qkv = tt::to_device<T>(hqkv, S, 3 * Hl);
  Cache k("k", nh, P, d), v("v", nh, P, d), scores("scores", nh, 64, P);
  tk::Matrix<T> out("out", S, Hl);
  // Workspaces start as NaN: whatever a row reads must have been written for it.
  Kokkos::deep_copy(scores, std::numeric_limits<T>::quiet_NaN());
  Kokkos::deep_copy(k, std::numeric_limits<T>::quiet_NaN());
  Kokkos::deep_copy(v, std::numeric_limits<T>::quiet_NaN());
  int p = 0;
  for (int n : {64, 1, 1, 7, 1, 57}) {
    const auto rows = std::make_pair(p, p + n);
    const auto q = Kokkos::subview(qkv, rows, Kokkos::ALL());
    tk::kv_cache_append(exec, q, k, v, p);
    tk::cached_attention_forward(exec, q, k, v, p, scores, Kokkos::subview(out, rows, Kokkos::ALL()));
    p += n;
  }
  REQUIRE(p == S);
  exec.fence();
  const auto want = tk::ref::attention_forward(hqkv, 1, S, nh, d);
  CHECK(tt::max_rel_err(tt::to_host(out), want.out) < 2 * tt::tol<T>());
}

TEST_CASE("cached attention refuses shapes and positions that do not fit", "[kernels][kv_cache]") {
  tptrain::kx::ExecSpace exec;
  using Cache = Kokkos::View<float***, Kokkos::LayoutRight, tptrain::kx::MemSpace>;
  tk::Matrix<float> qkv("qkv", 4, 3 * 6), out("out", 4, 6), wide("wide", 4, 7);
  Cache k("k", 2, 8, 3), v("v", 2, 8, 3), small("small", 2, 2, 8);
  CHECK_THROWS_WITH(tk::kv_cache_append(exec, qkv, k, v, 5), Catch::Contains("inside the cache"));
  CHECK_THROWS_WITH(tk::cached_attention_forward(exec, qkv, k, v, 0, small, out), Catch::Contains("scores must be"));
  CHECK_THROWS_WITH(tk::cached_attention_forward(exec, qkv, k, v, 0, Cache("s", 2, 4, 8), wide),
                    Catch::Contains("shapes must be"));
}
