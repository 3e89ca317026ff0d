// The batched attention path (kokkos_kernels/attention_batched.hpp, the device path) against the
// naive double reference and against the causal-tile path, in every recompute variant (scores
// recomputed, scores kept) and in fp32, fp64 and bf16; its launch counts do not depend on the
// shape; and the pointer-array GEMM against a naive loop.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>

#include "catch.hpp"
#include "kokkos_kernels/attention.hpp"
#include "kokkos_kernels/launch_count.hpp"
#include "reference.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

namespace {

using Exec = tptrain::kx::ExecSpace;

struct AttnShape {
  int B, S, nh, d;
};

struct Result {
  tt::HostVec out, lse, dqkv;
  tk::LaunchCounts forward, backward;
};

// Forward and backward on one path; every workspace starts as NaN (nothing may be read before
// it is written) and dqkv as garbage.
template <class T>
Result run_path(tk::AttentionPath path, bool keep, const AttnShape& s, const tt::HostVec& hqkv,
                const tt::HostVec& hdout) {
  using A = tptrain::kx::acc_t<T>;
  const tk::AttentionPathScope scope(path);
  const int Hl = s.nh * s.d, rows = s.B * s.S;
  Exec exec;
  auto qkv = tt::to_device<T>(hqkv, rows, 3 * Hl);
  // The row-tile buffer holds the batched path's pointer tables: at S < 13 the model's
  // [B, nh, S, S] one is too small for them (the model then runs the tiled path); a taller one
  // lets these short sequences exercise the batched path's row split.
  const auto tile = std::max<std::int64_t>(tk::attention_backward_tile_rows(s.S), 64);
  tk::Tensor4<T> probs("probs", s.B, s.nh, s.S, s.S), dprobs("dprobs", s.B, s.nh, tile, s.S),
      kept;
  if (keep) kept = tk::Tensor4<T>("kept", s.B, s.nh, s.S, s.S);
  const T nan = T(std::numeric_limits<float>::quiet_NaN());
  Kokkos::deep_copy(probs, nan);
  Kokkos::deep_copy(dprobs, nan);
  if (keep) Kokkos::deep_copy(kept, nan);
  tk::Matrix<T> out("out", rows, Hl), dqkv("dqkv", rows, 3 * Hl);
  Kokkos::deep_copy(dqkv, T(7));
  // dO in dqkv's Q block, as the model places it (the backward overwrites it with dQ).
  const auto dout = Kokkos::subview(dqkv, Kokkos::ALL(), std::make_pair(0, Hl));
  Kokkos::deep_copy(dout, tt::to_device<T>(hdout, rows, Hl));
  tk::Vector<A> lse("lse", static_cast<std::size_t>(rows) * s.nh);
  tk::Matrix<A> dkv_sum;
  if constexpr (tptrain::kx::is_half_v<T>) dkv_sum = tk::Matrix<A>("dkv_sum", rows, 2 * Hl);
  Result r;
  {
    tk::LaunchCounting counting;
    tk::attention_forward(exec, qkv, out, probs, lse, s.B, s.S, s.nh, s.d, kept, dprobs);
    exec.fence();
    r.forward = tk::launch_count::total();
    Kokkos::deep_copy(probs, nan);  // another layer's forward in between: probs is not state
    Kokkos::deep_copy(dprobs, nan);
    const tk::LaunchCounts before = tk::launch_count::total();
    tk::attention_backward(exec, dout, qkv, lse, dqkv, probs, dprobs, dkv_sum, kept);
    exec.fence();
    r.backward = tk::launch_count::total() - before;
  }
  r.out = tt::to_host(out);
  r.lse = tt::to_host(lse);
  r.dqkv = tt::to_host(dqkv);
  return r;
}

}  // namespace

TEMPLATE_TEST_CASE("batched attention equals the reference and the causal-tile path",
                   "[kernels][attention][batched]", float, double, tptrain::kx::bf16) {
  using T = TestType;
  // S = 2 and odd S (5, 7, 257): the smallest and the uneven row split; S = 130 and 257 cross the
  // tiled path's 128-row tile; B > nh and B < nh; S = 1 falls back to the tiled path.
  const AttnShape s = GENERATE(AttnShape{2, 5, 3, 4}, AttnShape{1, 2, 1, 3}, AttnShape{3, 7, 2, 5},
                               AttnShape{2, 16, 2, 8}, AttnShape{1, 130, 2, 7}, AttnShape{3, 257, 1, 3},
                               AttnShape{2, 1, 2, 4});
  const bool keep = GENERATE(false, true);
  INFO("B=" << s.B << " S=" << s.S << " nh=" << s.nh << " d=" << s.d << (keep ? " scores kept" : " recomputed"));
  const int Hl = s.nh * s.d, rows = s.B * s.S;
  std::mt19937 rng(77);
  const auto hqkv = tt::random_vec<T>(rng, static_cast<std::size_t>(rows) * 3 * Hl, -1.5, 1.5);
  const auto hdout = tt::random_vec<T>(rng, static_cast<std::size_t>(rows) * Hl);
  const Result batched = run_path<T>(tk::AttentionPath::batched, keep, s, hqkv, hdout);
  const Result tiled = run_path<T>(tk::AttentionPath::causal_tiles, keep, s, hqkv, hdout);

  const auto rf = tk::ref::attention_forward(hqkv, s.B, s.S, s.nh, s.d);
  const auto rb = tk::ref::attention_backward(hdout, hqkv, rf.att, s.B, s.S, s.nh, s.d);
  // bf16: both paths round P, dP and dS to 8 bits, in different GEMM shapes: a few roundings.
  const double f = tptrain::kx::is_half_v<T> ? 4 : 1;
  CHECK(tt::max_rel_err(batched.out, rf.out) < 2 * f * tt::tol<T>());
  CHECK(tt::max_rel_err(batched.dqkv, rb) < 4 * f * tt::tol<T>());
  CHECK(tt::max_rel_err(batched.out, tiled.out) < 2 * f * tt::tol<T>());
  CHECK(tt::max_rel_err(batched.lse, tiled.lse) < 2 * tt::tol<T>());
  CHECK(tt::max_rel_err(batched.dqkv, tiled.dqkv) < 4 * f * tt::tol<T>());

  // The launches: fixed on the batched path (forward: pointer tables + softmax kernels, Q Kᵀ and
  // P V; backward: pointer tables + one fused kernel per row chunk, three GEMMs per chunk, one
  // chunk with kept scores; bf16 rounds the fp32 dK and dV sums once, one kernel), whatever the
  // shape.
  if (s.S >= 2) {
    CHECK(batched.forward.kernels == 2);
    CHECK(batched.forward.blas == 2);
    CHECK(batched.backward.kernels == (keep ? 2 : 3) + (tptrain::kx::is_half_v<T> ? 1 : 0));
    CHECK(batched.backward.blas == (keep ? 3 : 6));
  } else {
    CHECK(batched.backward.blas == tiled.backward.blas);  // S = 1: the tiled path
  }
}

TEMPLATE_TEST_CASE("pointer_batched_gemm matches a naive loop", "[kernels][attention][gemm]", float, double,
                   tptrain::kx::bf16) {
  using T = TestType;
  using A = tptrain::kx::acc_t<T>;
  const char ta = GENERATE('N', 'T'), tb = GENERATE('N', 'T');
  const double beta = GENERATE(0.0, 0.5);
  const int M = 5, N = 7, K = 3, batch = 4, ld = 9;  // ld > every row length: strided rows
  INFO("op " << ta << tb << " beta " << beta);
  std::mt19937 rng(5);
  // The matrices sit in one buffer in scrambled order, 100 elements apart.
  const int slot = 100, order[batch] = {2, 0, 3, 1};
  const auto ha = tt::random_vec<T>(rng, static_cast<std::size_t>(slot) * batch);
  const auto hb = tt::random_vec<T>(rng, static_cast<std::size_t>(slot) * batch);
  const auto hc = tt::random_vec<T>(rng, static_cast<std::size_t>(slot) * batch);
  auto a = tt::to_device<T>(ha), b = tt::to_device<T>(hb), c = tt::to_device<T>(hc);
  // The tables as integers (a View of pointers would read as a rank-2 View of T).
  Kokkos::View<std::uintptr_t*, tptrain::kx::MemSpace> table("table", 3 * batch);
  const auto a0 = a.data(), b0 = b.data(), c0 = c.data();
  Kokkos::parallel_for(
      Kokkos::RangePolicy<Exec>(0, batch), KOKKOS_LAMBDA(const int i) {
        const int o[batch] = {2, 0, 3, 1};
        table(i) = reinterpret_cast<std::uintptr_t>(a0 + o[i] * slot);
        table(batch + i) = reinterpret_cast<std::uintptr_t>(b0 + o[(i + 1) % batch] * slot);
        table(2 * batch + i) = reinterpret_cast<std::uintptr_t>(c0 + o[(i + 2) % batch] * slot);
      });
  Exec exec;
  T** const t = reinterpret_cast<T**>(table.data());
  tk::pointer_batched_gemm<Exec, T, T>(exec, ta, tb, M, N, K, A(1.5), t, ld, t + batch, ld, A(beta), t + 2 * batch,
                                       ld, batch);
  exec.fence();
  const auto got = tt::to_host(c);
  tt::HostVec want = hc;
  for (int i = 0; i < batch; ++i) {
    const int pa = order[i] * slot, pb = order[(i + 1) % batch] * slot, pc = order[(i + 2) % batch] * slot;
    for (int r = 0; r < M; ++r)
      for (int col = 0; col < N; ++col) {
        double sum = 0;
        for (int k = 0; k < K; ++k) {
          const double x = ta == 'N' ? ha[pa + r * ld + k] : ha[pa + k * ld + r];
          const double y = tb == 'N' ? hb[pb + k * ld + col] : hb[pb + col * ld + k];
          sum += x * y;
        }
        double& w = want[pc + r * ld + col];
        w = 1.5 * sum + (beta == 0 ? 0.0 : beta * hc[pc + r * ld + col]);
      }
  }
  CHECK(tt::max_rel_err(got, want) < 2 * tt::tol<T>());
}
