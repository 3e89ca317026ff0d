// Vocab-parallel token embedding and position embedding against host loops; a vocabulary split
// over "ranks" reassembles the full lookup; accumulation and determinism of the backward (over
// the token segments grouped on the host).
#include "catch.hpp"
#include "kokkos_kernels/embedding.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

TEMPLATE_TEST_CASE("masked embedding over a vocabulary split matches the full lookup", "[kernels]",
                   float, double) {
  using T = TestType;
  const int V = 11, H = 13, B = 2, S = 5, N = B * S;
  const int parts = GENERATE(1, 2, 3);
  INFO("parts=" << parts);
  const int Vl = (V + parts - 1) / parts;  // rows per rank, last rank padded
  std::mt19937 rng(61);
  tptrain::kx::ExecSpace exec;
  const auto hwte = tt::random_vec<T>(rng, V * H);
  const auto hwpe = tt::random_vec<T>(rng, S * H);
  const auto hdy = tt::random_vec<T>(rng, N * H);
  std::vector<int> htok(N);
  std::uniform_int_distribution<int> tokdist(0, V - 1);
  for (auto& t : htok) t = tokdist(rng);
  htok[3] = htok[7];  // a repeated token: its gradient rows accumulate
  auto tokens = tt::tokens_to_device(htok);
  tk::TokenSegments segments(N);
  segments.build(exec, htok.data(), N);

  // Reference: full lookup + positions; dwte/dwpe by host loops, starting from random values.
  tt::HostVec ref_y(N * H), ref_dwte(V * H, 0.0), ref_dwpe(S * H, 0.0);
  for (int t = 0; t < N; ++t)
    for (int h = 0; h < H; ++h) {
      ref_y[t * H + h] =
          static_cast<double>(static_cast<T>(hwte[htok[t] * H + h] + hwpe[(t % S) * H + h]));
      ref_dwte[htok[t] * H + h] += hdy[t * H + h];
      ref_dwpe[(t % S) * H + h] += hdy[t * H + h];
    }

  auto dy = tt::to_device<T>(hdy, N, H);
  tt::HostVec y_sum(N * H, 0.0), dwte_full(V * H, 0.0);
  for (int r = 0; r < parts; ++r) {
    const int v0 = r * Vl;
    tt::HostVec shard(Vl * H, 0.0);  // padding rows stay 0
    for (int v = v0; v < std::min(V, v0 + Vl); ++v)
      for (int h = 0; h < H; ++h) shard[(v - v0) * H + h] = hwte[v * H + h];
    auto wte = tt::to_device<T>(shard, Vl, H);
    auto y = tt::to_device<T>(tt::random_vec<T>(rng, N * H), N, H);  // overwritten
    tk::embedding_forward_masked(exec, tokens, wte, v0, y);
    const auto hy = tt::to_host(y);
    for (int i = 0; i < N * H; ++i) y_sum[i] += hy[i];  // the all-reduce
    for (int t = 0; t < N; ++t)
      if (htok[t] < v0 || htok[t] >= v0 + Vl)
        for (int h = 0; h < H; ++h) CHECK(hy[t * H + h] == 0.0);

    tk::Matrix<T> dwte("dwte", Vl, H);
    tk::embedding_backward_masked(exec, segments, dy, v0, dwte);
    const auto hd = tt::to_host(dwte);
    for (int v = v0; v < std::min(V, v0 + Vl); ++v)
      for (int h = 0; h < H; ++h) dwte_full[v * H + h] = hd[(v - v0) * H + h];
    for (int v = V; v < v0 + Vl; ++v)  // padding rows get no gradient
      for (int h = 0; h < H; ++h) CHECK(hd[(v - v0) * H + h] == 0.0);
  }
  auto ysum_d = tt::to_device<T>(y_sum, N, H);
  auto wpe = tt::to_device<T>(hwpe, S, H);
  tk::position_embedding_add(exec, wpe, S, ysum_d);
  CHECK(tt::max_rel_err(tt::to_host(ysum_d), ref_y) < tt::tol<T>());
  CHECK(tt::max_rel_err(dwte_full, ref_dwte) < tt::tol<T>());

  // Position backward accumulates onto existing values, deterministically.
  const auto hdwpe0 = tt::random_vec<T>(rng, S * H);
  auto dwpe = tt::to_device<T>(hdwpe0, S, H);
  auto dwpe2 = tt::to_device<T>(hdwpe0, S, H);
  tk::position_embedding_backward(exec, dy, S, dwpe);
  tk::position_embedding_backward(exec, dy, S, dwpe2);
  exec.fence();
  for (int i = 0; i < S * H; ++i) ref_dwpe[i] += hdwpe0[i];
  CHECK(tt::max_rel_err(tt::to_host(dwpe), ref_dwpe, tt::max_abs(hdwpe0)) < tt::tol<T>());
  CHECK(tt::bitwise_equal(tt::to_host(dwpe), tt::to_host(dwpe2)));
}

TEST_CASE("embedding backward accumulates and is deterministic", "[kernels]") {
  using T = float;
  const int V = 7, H = 9, N = 40;
  std::mt19937 rng(62);
  tptrain::kx::ExecSpace exec;
  std::vector<int> htok(N);
  std::uniform_int_distribution<int> tokdist(0, V - 1);
  for (auto& t : htok) t = tokdist(rng);  // many repeats
  const auto hdy = tt::random_vec<T>(rng, N * H);
  const auto hd0 = tt::random_vec<T>(rng, V * H);
  auto dy = tt::to_device<T>(hdy, N, H);
  tt::HostVec ref = hd0;
  for (int t = 0; t < N; ++t)
    for (int h = 0; h < H; ++h) ref[htok[t] * H + h] += hdy[t * H + h];

  tk::TokenSegments seg(N);
  seg.build(exec, htok.data(), N);
  auto s1 = tt::to_device<T>(hd0, V, H);
  auto s2 = tt::to_device<T>(hd0, V, H);
  tk::embedding_backward_masked(exec, seg, dy, 0, s1);
  tk::embedding_backward_masked(exec, seg, dy, 0, s2);
  CHECK(tt::max_rel_err(tt::to_host(s1), ref, tt::max_abs(hd0)) < tt::tol<T>());
  CHECK(tt::bitwise_equal(tt::to_host(s1), tt::to_host(s2)));
  // Accumulated twice: twice the increments.
  tk::embedding_backward_masked(exec, seg, dy, 0, s1);
  tt::HostVec ref2 = ref;
  for (std::size_t i = 0; i < ref2.size(); ++i) ref2[i] += ref[i] - hd0[i];
  CHECK(tt::max_rel_err(tt::to_host(s1), ref2, tt::max_abs(hd0)) < tt::tol<T>());
}
