// Team kernels (layernorm, attention, cross-entropy rows) with several threads per team: on
// multi-threaded host backends (OpenMP) this runs their team barriers and team reductions as a
// GPU would. On Serial only team size 1 exists, and the test checks that alone.
#include <algorithm>
#include <type_traits>

#include "catch.hpp"
#include "kokkos_kernels/attention.hpp"
#include "kokkos_kernels/cross_entropy.hpp"
#include "kokkos_kernels/layernorm.hpp"
#include "reference.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

namespace {

using tptrain::kernels::test::TeamSizeGuard;

// One attention forward and backward on host data qkv [B*S, 3·nh·d], dout [B*S, nh·d]; the
// probabilities as the forward left them (the backward reuses their buffer).
struct AttentionRun {
  tt::HostVec probs, lse, out, dqkv;
};
template <class T>
AttentionRun run_attention(const tptrain::kx::ExecSpace& exec, const tt::HostVec& hqkv, const tt::HostVec& hdo,
                           const int B, const int S, const int nh, const int d) {
  const int Hl = nh * d;
  auto qkv = tt::to_device<T>(hqkv, B * S, 3 * Hl);
  auto dout = tt::to_device<T>(hdo, B * S, Hl);
  tk::Matrix<T> out("out", B * S, Hl), dqkv("dqkv", B * S, 3 * Hl);
  tk::Tensor4<T> probs("probs", B, nh, S, S), dprobs("dprobs", B, nh, S, S);
  tk::Vector<T> lse("lse", B * nh * S);
  tk::attention_forward(exec, qkv, out, probs, lse, B, S, nh, d);
  AttentionRun run;
  run.probs = tt::to_host(probs);
  tk::attention_backward(exec, dout, qkv, lse, dqkv, probs, dprobs);
  run.lse = tt::to_host(lse);
  run.out = tt::to_host(out);
  run.dqkv = tt::to_host(dqkv);
  return run;
}

}  // namespace

TEST_CASE("team kernels agree with references for every team size", "[kernels]") {
  using T = double;
  using Exec = tptrain::kx::ExecSpace;
  Exec exec;
  for (const int ts : tt::team_sizes(exec)) {
    INFO("team size " << ts);
    TeamSizeGuard guard(ts);
    std::mt19937 rng(111);
    // layernorm
    const int N = 5, H = 37;
    const auto hx = tt::random_vec<T>(rng, N * H);
    const auto hg = tt::random_vec<T>(rng, H);
    const auto hdy = tt::random_vec<T>(rng, N * H);
    auto x = tt::to_device<T>(hx, N, H);
    auto g = tt::to_device<T>(hg);
    auto dy = tt::to_device<T>(hdy, N, H);
    tk::Matrix<T> y("y", N, H), dx("dx", N, H);
    tk::Vector<T> mean("mean", N), rstd("rstd", N), dg("dg", H), db("db", H);
    tk::layernorm_forward(exec, x, g, g, y, mean, rstd, 1e-5);
    tk::layernorm_backward(exec, dy, x, g, mean, rstd, dx, dg, db);
    CHECK(tt::max_rel_err(tt::to_host(y), tk::ref::layernorm_forward(hx, hg, hg, N, H, 1e-5).y) <
          1e-12);
    CHECK(tt::max_rel_err(tt::to_host(dx),
                          tk::ref::layernorm_backward(hdy, hx, hg, N, H, 1e-5).dx) < 1e-12);

    // attention
    const int B = 2, S = 11, nh = 2, d = 5, Hl = nh * d;
    const auto hqkv = tt::random_vec<T>(rng, B * S * 3 * Hl);
    const auto hdo = tt::random_vec<T>(rng, B * S * Hl);
    const AttentionRun a = run_attention<T>(exec, hqkv, hdo, B, S, nh, d);
    const auto rf = tk::ref::attention_forward(hqkv, B, S, nh, d);
    CHECK(tt::max_rel_err(a.probs, rf.att) < 1e-12);
    CHECK(tt::max_rel_err(a.out, rf.out) < 1e-12);
    CHECK(tt::max_rel_err(a.dqkv, tk::ref::attention_backward(hdo, hqkv, rf.att, B, S, nh, d)) < 1e-12);

    // cross-entropy row reductions
    const int V = 41;
    const auto hl = tt::random_vec<T>(rng, N * V, -3.0, 3.0);
    auto logits = tt::to_device<T>(hl, N, V);
    tk::Vector<T> m("m", N), s("s", N);
    tk::row_max(exec, logits, V - 3, m);
    tk::row_sum_exp(exec, logits, m, V - 3, s);
    const auto hm = tt::to_host(m), hs = tt::to_host(s);
    for (int t = 0; t < N; ++t) {
      double rm = hl[t * V], rs = 0;
      for (int v = 1; v < V - 3; ++v) rm = std::max(rm, hl[t * V + v]);
      for (int v = 0; v < V - 3; ++v) rs += std::exp(hl[t * V + v] - rm);
      CHECK(hm[t] == rm);
      CHECK(std::fabs(hs[t] - rs) < 1e-12 * rs);
    }
  }
}

// On GPUs the row kernels keep rows in team scratch when they fit and read global memory each
// pass otherwise; both paths do the same arithmetic, so their results are bitwise equal, for
// every team size. (Host backends compile only the second path, detail::scratch_rows: there the
// test runs it twice, which checks determinism.)
TEST_CASE("row kernels give the same bits with and without team scratch", "[kernels]") {
  using T = double;
  using Exec = tptrain::kx::ExecSpace;
  Exec exec;
  std::mt19937 rng(112);
  const int N = 6, H = 301;
  const auto hx = tt::random_vec<T>(rng, N * H);
  const auto hr = tt::random_vec<T>(rng, N * H);
  const auto hg = tt::random_vec<T>(rng, H);
  const auto hdy = tt::random_vec<T>(rng, N * H);
  const int B = 2, S = 37, nh = 2, d = 4, Hl = nh * d;
  const auto hqkv = tt::random_vec<T>(rng, B * S * 3 * Hl);
  const auto hdo = tt::random_vec<T>(rng, B * S * Hl);
  // Every output of the row kernels, concatenated.
  const auto run = [&]() {
    auto x = tt::to_device<T>(hx, N, H);
    auto r = tt::to_device<T>(hr, N, H);
    auto g = tt::to_device<T>(hg);
    auto dy = tt::to_device<T>(hdy, N, H);
    tk::Matrix<T> y("y", N, H), dx("dx", N, H), x1("x1", N, H), y1("y1", N, H);
    tk::Vector<T> mean("mean", N), rstd("rstd", N), dg("dg", H), db("db", H);
    tk::layernorm_forward(exec, x, g, g, y, mean, rstd, 1e-5);
    tk::layernorm_backward(exec, dy, x, g, mean, rstd, dx, dg, db);
    tk::add_layernorm_forward(exec, x, r, x1, g, g, y1, mean, rstd, 1e-5);
    const AttentionRun a = run_attention<T>(exec, hqkv, hdo, B, S, nh, d);
    tt::HostVec all;
    for (const auto& v : {tt::to_host(y), tt::to_host(mean), tt::to_host(rstd), tt::to_host(dx),
                          tt::to_host(dg), tt::to_host(db), tt::to_host(x1), tt::to_host(y1),
                          a.probs, a.lse, a.out, a.dqkv})
      all.insert(all.end(), v.begin(), v.end());
    return all;
  };
  for (const int ts : tt::team_sizes(exec)) {
    INFO("team size " << ts);
    TeamSizeGuard guard(ts);
    tt::HostVec cached, global;
    {  // scratch wherever the backend has room (by default only GPUs use it)
      tt::ScratchLimitGuard scratch(
          static_cast<std::int64_t>(tk::detail::Teams<Exec>::scratch_size_max(0)));
      cached = run();
    }
    {
      tt::ScratchLimitGuard no_scratch(0);
      global = run();
    }
    CHECK(tt::bitwise_equal(cached, global));
  }
}
