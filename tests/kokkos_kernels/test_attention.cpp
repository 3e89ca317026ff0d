// Causal attention core (kokkos_kernels/attention.hpp) and its pieces: the strided-batched GEMM
// seam against a naive loop, the fused softmax passes against naive row softmax / Jacobian,
// forward and backward against the naive reference (shapes across the causal tile boundary),
// finite differences in double, causality and bitwise determinism; the backward's row-tile
// dP / dS buffer, with the default tile and with many small tiles.
#include <algorithm>
#include <limits>
#include <stdexcept>

#include "catch.hpp"
#include "kokkos_kernels/attention.hpp"
#include "reference.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

namespace {

using Exec = tptrain::kx::ExecSpace;

struct AttnShape {
  int B, S, nh, d;
};

template <class T>
using Flat = Kokkos::View<T*, tptrain::kx::MemSpace>;

template <class T>
Flat<T> flat_to_device(const tt::HostVec& h) {
  Flat<T> d("flat", h.size());
  auto m = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < h.size(); ++i) m(i) = static_cast<T>(h[i]);
  Kokkos::deep_copy(d, m);
  return d;
}

template <class T>
tk::Tensor4<T> tensor_to_device(const tt::HostVec& host, int B, int nh, int S) {
  tk::Tensor4<T> d("t4", B, nh, S, S);
  auto m = Kokkos::create_mirror_view(d);
  std::size_t n = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < nh; ++h)
      for (int i = 0; i < S; ++i)
        for (int j = 0; j < S; ++j) m(b, h, i, j) = static_cast<T>(host[n++]);
  Kokkos::deep_copy(d, m);
  return d;
}

// Naive row-major C_i = alpha op(A_i) op(B_i) + beta C_i in double.
tt::HostVec naive_batched_gemm(char ta, char tb, int M, int N, int K, double alpha,
                               const tt::HostVec& A, int lda, int sA, const tt::HostVec& B,
                               int ldb, int sB, double beta, tt::HostVec C, int ldc, int sC,
                               int batch) {
  for (int i = 0; i < batch; ++i)
    for (int r = 0; r < M; ++r)
      for (int c = 0; c < N; ++c) {
        double acc = 0;
        for (int k = 0; k < K; ++k) {
          const double a = ta == 'N' ? A[i * sA + r * lda + k] : A[i * sA + k * lda + r];
          const double b = tb == 'N' ? B[i * sB + k * ldb + c] : B[i * sB + c * ldb + k];
          acc += a * b;
        }
        double& out = C[i * sC + r * ldc + c];
        out = alpha * acc + (beta == 0 ? 0.0 : beta * out);
      }
  return C;
}

// Naive row softmax of scale·s over j <= i, and its log normaliser.
struct SoftmaxRef {
  tt::HostVec p, lse;
};
SoftmaxRef naive_causal_softmax(const tt::HostVec& s, int rows_bh, int S, double scale) {
  SoftmaxRef r{tt::HostVec(s.size(), 0.0), tt::HostVec(static_cast<std::size_t>(rows_bh) * S)};
  for (int bh = 0; bh < rows_bh; ++bh)
    for (int i = 0; i < S; ++i) {
      const double* row = &s[(static_cast<std::size_t>(bh) * S + i) * S];
      double m = -1e300;
      for (int j = 0; j <= i; ++j) m = std::max(m, scale * row[j]);
      double z = 0;
      for (int j = 0; j <= i; ++j) z += std::exp(scale * row[j] - m);
      r.lse[bh * S + i] = m + std::log(z);
      for (int j = 0; j <= i; ++j)
        r.p[(static_cast<std::size_t>(bh) * S + i) * S + j] = std::exp(scale * row[j] - m) / z;
    }
  return r;
}

// lse of the naive attention forward, from its probabilities and the scores.
tt::HostVec naive_lse(const tt::HostVec& qkv, int B, int S, int nh, int d) {
  const int Hl = nh * d;
  tt::HostVec s(static_cast<std::size_t>(B) * nh * S * S, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < nh; ++h)
      for (int i = 0; i < S; ++i)
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int k = 0; k < d; ++k)
            dot += qkv[(b * S + i) * 3 * Hl + h * d + k] * qkv[(b * S + j) * 3 * Hl + Hl + h * d + k];
          s[((static_cast<std::size_t>(b) * nh + h) * S + i) * S + j] = dot;
        }
  return naive_causal_softmax(s, B * nh, S, 1.0 / std::sqrt(static_cast<double>(d))).lse;
}

}  // namespace

TEMPLATE_TEST_CASE("batched_gemm matches a naive loop", "[kernels][attention][gemm]", float,
                   double) {
  using T = TestType;
  const char ta = GENERATE('N', 'T'), tb = GENERATE('N', 'T');
  const bool portable = GENERATE(false, true);  // the vendor path and the Kokkos fallback
  struct Case {
    int M, N, K, batch;
    double alpha, beta;
  };
  const Case c = GENERATE(Case{5, 7, 3, 3, 1.0, 0.0}, Case{4, 1, 9, 2, 0.5, -1.5},
                          Case{1, 6, 1, 1, -2.0, 1.0}, Case{3, 4, 0, 2, 1.0, 0.5});
  INFO("op " << ta << tb << " M=" << c.M << " N=" << c.N << " K=" << c.K << " batch=" << c.batch
             << (portable ? " kokkos fallback" : " batched_gemm"));
  // Leading dimensions wider than the rows and batch strides wider than the matrices, as for
  // the head slices of qkv.
  const int rowsA = ta == 'N' ? c.M : c.K, colsA = ta == 'N' ? c.K : c.M;
  const int rowsB = tb == 'N' ? c.K : c.N, colsB = tb == 'N' ? c.N : c.K;
  const int lda = colsA + 3, ldb = colsB + 2, ldc = c.N + 4;
  const int sA = rowsA * lda + 5, sB = rowsB * ldb + 1, sC = c.M * ldc + 7;
  std::mt19937 rng(7);
  const auto hA = tt::random_vec<T>(rng, static_cast<std::size_t>(sA) * c.batch);
  const auto hB = tt::random_vec<T>(rng, static_cast<std::size_t>(sB) * c.batch);
  auto hC = tt::random_vec<T>(rng, static_cast<std::size_t>(sC) * c.batch);
  if (c.beta == 0) {
    // beta = 0 must not read C: NaN there may not leak into the result.
    for (auto& x : hC) x = std::numeric_limits<double>::quiet_NaN();
  }
  const auto ref = naive_batched_gemm(ta, tb, c.M, c.N, c.K, c.alpha, hA, lda, sA, hB, ldb, sB,
                                      c.beta, hC, ldc, sC, c.batch);
  auto A = flat_to_device<T>(hA), B = flat_to_device<T>(hB), C = flat_to_device<T>(hC);
  Exec exec;
  if (portable) {
    tk::detail::batched_gemm_kokkos<Exec, T>(exec, ta, tb, c.M, c.N, c.K, T(c.alpha), A.data(),
                                             lda, sA, B.data(), ldb, sB, T(c.beta), C.data(),
                                             ldc, sC, c.batch);
  } else {
    tk::batched_gemm<Exec, T>(exec, ta, tb, c.M, c.N, c.K, T(c.alpha), A.data(), lda, sA,
                              B.data(), ldb, sB, T(c.beta), C.data(), ldc, sC, c.batch);
  }
  exec.fence();
  const auto got = tt::to_host(C);
  // Entries outside the C matrices (ld and stride padding) are untouched.
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::size_t in = i % sC;
    const bool inside = static_cast<int>(in) < c.M * ldc && static_cast<int>(in % ldc) < c.N;
    if (!inside && !(std::isnan(got[i]) && std::isnan(hC[i]))) CHECK(got[i] == hC[i]);
    if (inside) CHECK(std::fabs(got[i] - ref[i]) <= 8 * tt::tol<T>() * (1 + std::fabs(ref[i])));
  }
}

TEST_CASE("batched_gemm refuses bad arguments before touching memory", "[kernels][attention][gemm]") {
  Exec exec;
  float* none = nullptr;
  // Arguments: op(A), op(B), M, N, K, lda; everything else valid.
  auto call = [&](char ta, char tb, std::int64_t M, std::int64_t N, std::int64_t K,
                  std::int64_t lda) {
    tk::batched_gemm(exec, ta, tb, M, N, K, 1.f, none, lda, 0, none, 8, 0, 0.f, none, 8, 0, 1);
  };
  CHECK_THROWS_AS(call('N', 'N', 2, 2, 3, 2), std::invalid_argument);  // lda < a row of A
  CHECK_THROWS_AS(call('T', 'N', 3, 2, 2, 2), std::invalid_argument);  // lda < a row of Aᵀ
  CHECK_THROWS_AS(call('C', 'N', 2, 2, 2, 8), std::invalid_argument);
  // BLAS counts in int: M = 2^31 must not reach it negative.
  const std::int64_t big = std::int64_t(1) << 31;
  CHECK_THROWS_AS(call('N', 'N', big, 2, 2, 8), std::length_error);
  CHECK_THROWS_AS(call('N', 'N', 2, 2, 2, big), std::length_error);
}

TEMPLATE_TEST_CASE("causal softmax passes match naive row softmax and its Jacobian",
                   "[kernels][attention]", float, double) {
  using T = TestType;
  const int B = 2, nh = 3, S = GENERATE(1, 6, 33);
  INFO("S=" << S);
  const double scale = 0.3;
  std::mt19937 rng(61);
  auto hs = tt::random_vec<T>(rng, static_cast<std::size_t>(B) * nh * S * S, -4.0, 4.0);
  auto hdp = tt::random_vec<T>(rng, hs.size());
  const auto ref = naive_causal_softmax(hs, B * nh, S, scale);
  // Masked inputs are never read: NaN there must not reach any output.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int bh = 0; bh < B * nh; ++bh)
    for (int i = 0; i < S; ++i)
      for (int j = i + 1; j < S; ++j) {
        hs[(static_cast<std::size_t>(bh) * S + i) * S + j] = nan;
        hdp[(static_cast<std::size_t>(bh) * S + i) * S + j] = nan;
      }
  Exec exec;
  auto probs = tensor_to_device<T>(hs, B, nh, S);
  tk::Vector<T> lse("lse", B * nh * S);
  tk::causal_softmax_forward(exec, probs, lse, T(scale));
  const auto hp = tt::to_host(probs);
  CHECK(tt::max_rel_err(hp, ref.p) < tt::tol<T>());
  CHECK(tt::max_rel_err(tt::to_host(lse), ref.lse) < tt::tol<T>());
  for (int bh = 0; bh < B * nh; ++bh)
    for (int i = 0; i < S; ++i)
      for (int j = i + 1; j < S; ++j) CHECK(hp[(static_cast<std::size_t>(bh) * S + i) * S + j] == 0.0);

  // Recomputing P from lse gives the forward probabilities.
  auto again = tensor_to_device<T>(hs, B, nh, S);
  tk::causal_softmax_recompute(exec, again, lse, T(scale));
  const auto ha = tt::to_host(again);
  CHECK(tt::max_rel_err(ha, ref.p) < 4 * tt::tol<T>());
  CHECK(tt::max_rel_err(ha, hp) < 4 * tt::tol<T>());

  // dS_ij = scale Σ_l dP_il P_il (δ_jl - P_ij), written through the full Jacobian.
  tt::HostVec rds(hs.size(), 0.0);
  for (int bh = 0; bh < B * nh; ++bh)
    for (int i = 0; i < S; ++i) {
      const std::size_t row = (static_cast<std::size_t>(bh) * S + i) * S;
      for (int j = 0; j <= i; ++j) {
        double s = 0;
        for (int l = 0; l <= i; ++l)
          s += hdp[row + l] * hp[row + l] * ((j == l ? 1.0 : 0.0) - hp[row + j]);
        rds[row + j] = scale * s;
      }
    }
  auto dprobs = tensor_to_device<T>(hdp, B, nh, S);
  tk::causal_softmax_backward(exec, probs, dprobs, T(scale));
  const auto hds = tt::to_host(dprobs);
  CHECK(tt::max_rel_err(hds, rds) < 4 * tt::tol<T>());
  for (int bh = 0; bh < B * nh; ++bh)
    for (int i = 0; i < S; ++i)
      for (int j = i + 1; j < S; ++j)
        CHECK(hds[(static_cast<std::size_t>(bh) * S + i) * S + j] == 0.0);

  // The row-range variant on a [B, nh, tile, S] buffer (rows of 4, the last one partial): the
  // same dS on columns j < r1 (bitwise: same reduction per row), columns r1.. and the tile rows
  // past r1 - r0 untouched.
  const int tile = 4;
  for (int r0 = 0; r0 < S; r0 += tile) {
    const int r1 = std::min(S, r0 + tile);
    INFO("rows " << r0 << ".." << r1);
    tt::HostVec htile(static_cast<std::size_t>(B) * nh * tile * S, 7.0);
    for (int bh = 0; bh < B * nh; ++bh)
      for (int t = 0; t < r1 - r0; ++t)
        for (int j = 0; j < S; ++j)
          htile[(static_cast<std::size_t>(bh) * tile + t) * S + j] =
              hdp[(static_cast<std::size_t>(bh) * S + r0 + t) * S + j];
    tk::Tensor4<T> dtile("dtile", B, nh, tile, S);
    {
      auto m = Kokkos::create_mirror_view(dtile);
      std::size_t n = 0;
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < nh; ++h)
          for (int t = 0; t < tile; ++t)
            for (int j = 0; j < S; ++j) m(b, h, t, j) = static_cast<T>(htile[n++]);
      Kokkos::deep_copy(dtile, m);
    }
    tk::causal_softmax_backward_rows(exec, probs, dtile, r0, r1, T(scale));
    const auto got = tt::to_host(dtile);
    for (int bh = 0; bh < B * nh; ++bh)
      for (int t = 0; t < tile; ++t)
        for (int j = 0; j < S; ++j) {
          const std::size_t at = (static_cast<std::size_t>(bh) * tile + t) * S + j;
          const double was = static_cast<T>(htile[at]);
          if (t < r1 - r0 && j < r1) {
            const double want = hds[(static_cast<std::size_t>(bh) * S + r0 + t) * S + j];
            CHECK(got[at] == want);
          } else if (!(std::isnan(got[at]) && std::isnan(was))) {
            CHECK(got[at] == was);
          }
        }
  }
  // A tile buffer with too few rows or a bad range is refused.
  tk::Tensor4<T> small("small", B, nh, 2, S);
  if (S >= 3) {
    CHECK_THROWS_AS(tk::causal_softmax_backward_rows(exec, probs, small, 0, 3, T(scale)),
                    std::invalid_argument);
  }
  CHECK_THROWS_AS(tk::causal_softmax_backward_rows(exec, probs, small, 0, S + 1, T(scale)),
                  std::invalid_argument);
}

TEMPLATE_TEST_CASE("attention forward/backward match naive reference", "[kernels][attention]",
                   float, double) {
  using T = TestType;
  // S = 130 and 257 cross the causal tile (128 rows) with a partial last tile; d = 5, 7 are not
  // multiples of 8; B > nh and B < nh batch over heads and over batches.
  const AttnShape s = GENERATE(AttnShape{2, 5, 3, 4}, AttnShape{1, 1, 1, 1}, AttnShape{3, 7, 2, 5},
                               AttnShape{2, 16, 2, 8}, AttnShape{1, 130, 2, 7},
                               AttnShape{3, 257, 1, 3});
  INFO("B=" << s.B << " S=" << s.S << " nh=" << s.nh << " d=" << s.d);
  const int Hl = s.nh * s.d, rows = s.B * s.S;
  std::mt19937 rng(51);
  Exec exec;
  const auto hqkv = tt::random_vec<T>(rng, static_cast<std::size_t>(rows) * 3 * Hl, -1.5, 1.5);
  const auto hdout = tt::random_vec<T>(rng, static_cast<std::size_t>(rows) * Hl);
  auto qkv = tt::to_device<T>(hqkv, rows, 3 * Hl);
  auto dout = tt::to_device<T>(hdout, rows, Hl);
  tk::Matrix<T> out("out", rows, Hl);
  tk::Vector<T> lse("lse", static_cast<std::size_t>(rows) * s.nh);
  // Workspaces start as NaN and dqkv as random values: everything must be overwritten. The
  // backward's dP / dS buffer holds one row tile, [B, nh, tile, S].
  const auto tile = tk::attention_backward_tile_rows(s.S);
  CHECK(tile == std::min(s.S, 128));
  tk::Tensor4<T> probs("probs", s.B, s.nh, s.S, s.S), dprobs("dprobs", s.B, s.nh, tile, s.S);
  Kokkos::deep_copy(probs, std::numeric_limits<T>::quiet_NaN());
  Kokkos::deep_copy(dprobs, std::numeric_limits<T>::quiet_NaN());
  auto dqkv = tt::to_device<T>(tt::random_vec<T>(rng, hqkv.size()), rows, 3 * Hl);

  tk::attention_forward(exec, qkv, out, probs, lse, s.B, s.S, s.nh, s.d);
  const auto hout = tt::to_host(out), hprobs = tt::to_host(probs), hlse = tt::to_host(lse);
  Kokkos::deep_copy(probs, std::numeric_limits<T>::quiet_NaN());  // backward must not read it
  tk::attention_backward(exec, dout, qkv, lse, dqkv, probs, dprobs);
  exec.fence();

  const auto rf = tk::ref::attention_forward(hqkv, s.B, s.S, s.nh, s.d);
  CHECK(tt::max_rel_err(hout, rf.out) < 2 * tt::tol<T>());
  CHECK(tt::max_rel_err(hprobs, rf.att) < 2 * tt::tol<T>());
  CHECK(tt::max_rel_err(hlse, naive_lse(hqkv, s.B, s.S, s.nh, s.d)) < tt::tol<T>());
  // Masked entries are exactly 0 and every row sums to 1.
  for (int bh = 0; bh < s.B * s.nh; ++bh)
    for (int i = 0; i < s.S; ++i) {
      double sum = 0;
      for (int j = 0; j < s.S; ++j) {
        const double p = hprobs[(static_cast<std::size_t>(bh) * s.S + i) * s.S + j];
        if (j > i) CHECK(p == 0.0);
        sum += p;
      }
      CHECK(std::fabs(sum - 1.0) < 10 * tt::tol<T>());
    }
  const auto rb = tk::ref::attention_backward(hdout, hqkv, rf.att, s.B, s.S, s.nh, s.d);
  const auto hdqkv = tt::to_host(dqkv);
  CHECK(tt::max_rel_err(hdqkv, rb) < 4 * tt::tol<T>());

  // Determinism: a second forward and backward (fresh workspaces, the allocating overloads) are
  // bitwise identical.
  tk::Matrix<T> out2("out2", rows, Hl), dqkv2("dqkv2", rows, 3 * Hl);
  tk::Vector<T> lse2("lse2", static_cast<std::size_t>(rows) * s.nh);
  tk::attention_forward(exec, qkv, out2, lse2, s.B, s.S, s.nh, s.d);
  tk::attention_backward(exec, dout, qkv, lse2, dqkv2, s.B, s.S, s.nh);
  exec.fence();
  CHECK(tt::bitwise_equal(hout, tt::to_host(out2)));
  CHECK(tt::bitwise_equal(hlse, tt::to_host(lse2)));
  CHECK(tt::bitwise_equal(hdqkv, tt::to_host(dqkv2)));

  // A full [B, nh, S, S] buffer is still accepted (tile rows >= the tile) and gives the same
  // bits; so does a repeated call into the same (dirty) workspaces.
  tk::Tensor4<T> full("full", s.B, s.nh, s.S, s.S);
  Kokkos::deep_copy(full, std::numeric_limits<T>::quiet_NaN());
  tk::attention_backward(exec, dout, qkv, lse, dqkv2, probs, full);
  exec.fence();
  CHECK(tt::bitwise_equal(hdqkv, tt::to_host(dqkv2)));
  tk::attention_backward(exec, dout, qkv, lse, dqkv2, probs, dprobs);
  exec.fence();
  CHECK(tt::bitwise_equal(hdqkv, tt::to_host(dqkv2)));
}

TEMPLATE_TEST_CASE("attention backward over many small row tiles matches the reference",
                   "[kernels][attention]", float, double) {
  using T = TestType;
  // Row tiles of 1, 3, 4 and 5 rows: many tiles, partial last ones, dK accumulated over them.
  const AttnShape s = GENERATE(AttnShape{2, 13, 3, 4}, AttnShape{3, 9, 2, 5}, AttnShape{1, 1, 2, 3});
  const int tile = GENERATE(1, 3, 4, 5);
  INFO("B=" << s.B << " S=" << s.S << " nh=" << s.nh << " d=" << s.d << " tile=" << tile);
  const int Hl = s.nh * s.d, rows = s.B * s.S;
  std::mt19937 rng(57);
  Exec exec;
  const auto hqkv = tt::random_vec<T>(rng, static_cast<std::size_t>(rows) * 3 * Hl, -1.5, 1.5);
  const auto hdout = tt::random_vec<T>(rng, static_cast<std::size_t>(rows) * Hl);
  auto qkv = tt::to_device<T>(hqkv, rows, 3 * Hl);
  auto dout = tt::to_device<T>(hdout, rows, Hl);
  tk::Matrix<T> out("out", rows, Hl);
  tk::Vector<T> lse("lse", static_cast<std::size_t>(rows) * s.nh);
  const int tile_rows = std::min(s.S, tile);
  tk::Tensor4<T> probs("probs", s.B, s.nh, s.S, s.S), dprobs("dprobs", s.B, s.nh, tile_rows, s.S);
  Kokkos::deep_copy(probs, std::numeric_limits<T>::quiet_NaN());
  Kokkos::deep_copy(dprobs, std::numeric_limits<T>::quiet_NaN());
  auto dqkv = tt::to_device<T>(tt::random_vec<T>(rng, hqkv.size()), rows, 3 * Hl);
  tk::attention_forward(exec, qkv, out, probs, lse, s.B, s.S, s.nh, s.d);
  Kokkos::deep_copy(probs, std::numeric_limits<T>::quiet_NaN());
  tk::attention_backward_tiled(exec, dout, qkv, lse, dqkv, probs, dprobs, tile);
  exec.fence();
  const auto rf = tk::ref::attention_forward(hqkv, s.B, s.S, s.nh, s.d);
  const auto rb = tk::ref::attention_backward(hdout, hqkv, rf.att, s.B, s.S, s.nh, s.d);
  const auto hdqkv = tt::to_host(dqkv);
  CHECK(tt::max_rel_err(hdqkv, rb) < 4 * tt::tol<T>());
  // Deterministic: the same tile gives the same bits.
  auto dqkv2 = tt::to_device<T>(tt::random_vec<T>(rng, hqkv.size()), rows, 3 * Hl);
  tk::attention_backward_tiled(exec, dout, qkv, lse, dqkv2, probs, dprobs, tile);
  exec.fence();
  CHECK(tt::bitwise_equal(hdqkv, tt::to_host(dqkv2)));
  // Too few tile rows, or a zero tile, is refused before anything is written.
  if (tile_rows > 1) {
    tk::Tensor4<T> small("small", s.B, s.nh, tile_rows - 1, s.S);
    CHECK_THROWS_AS(tk::attention_backward_tiled(exec, dout, qkv, lse, dqkv2, probs, small, tile),
                    std::invalid_argument);
  }
  CHECK_THROWS_AS(tk::attention_backward_tiled(exec, dout, qkv, lse, dqkv2, probs, dprobs, 0),
                  std::invalid_argument);
  CHECK(tt::bitwise_equal(hdqkv, tt::to_host(dqkv2)));
}

TEST_CASE("attention backward matches finite differences (double)", "[kernels][attention]") {
  using T = double;
  const int B = 2, S = 5, nh = 3, d = 4, Hl = nh * d, rows = B * S;
  std::mt19937 rng(52);
  Exec exec;
  const auto hqkv = tt::random_vec<T>(rng, rows * 3 * Hl, -1.5, 1.5);
  const auto hw = tt::random_vec<T>(rng, rows * Hl);  // L = Σ w ⊙ out
  tk::Vector<T> lse("lse", B * nh * S);
  auto loss = [&](const tt::HostVec& v) {
    auto qkv = tt::to_device<T>(v, rows, 3 * Hl);
    tk::Matrix<T> out("out", rows, Hl);
    tk::attention_forward(exec, qkv, out, lse, B, S, nh, d);
    return tt::dot(hw, tt::to_host(out));
  };
  auto qkv = tt::to_device<T>(hqkv, rows, 3 * Hl);
  auto w = tt::to_device<T>(hw, rows, Hl);
  tk::Matrix<T> out("out", rows, Hl), dqkv("dqkv", rows, 3 * Hl);
  tk::attention_forward(exec, qkv, out, lse, B, S, nh, d);
  tk::attention_backward(exec, w, qkv, lse, dqkv, B, S, nh);
  CHECK(tt::max_rel_err(tt::to_host(dqkv), tt::fd_gradient(loss, hqkv)) < tt::fd_tol);
}

TEST_CASE("attention is causal: later tokens do not change earlier outputs", "[kernels][attention]") {
  using T = double;
  const int B = 1, S = 6, nh = 2, d = 3, Hl = nh * d;
  std::mt19937 rng(53);
  Exec exec;
  auto hqkv = tt::random_vec<T>(rng, S * 3 * Hl);
  tk::Matrix<T> out1("out1", S, Hl), out2("out2", S, Hl);
  tk::Tensor4<T> probs("probs", B, nh, S, S);
  tk::Vector<T> lse("lse", B * nh * S);
  tk::attention_forward(exec, tt::to_device<T>(hqkv, S, 3 * Hl), out1, probs, lse, B, S, nh, d);
  for (int c = 0; c < 3 * Hl; ++c) hqkv[(S - 1) * 3 * Hl + c] += 0.5;  // change the last token
  tk::attention_forward(exec, tt::to_device<T>(hqkv, S, 3 * Hl), out2, probs, lse, B, S, nh, d);
  const auto h1 = tt::to_host(out1), h2 = tt::to_host(out2);
  CHECK(tt::bitwise_equal(tt::HostVec(h1.begin(), h1.end() - Hl),
                          tt::HostVec(h2.begin(), h2.end() - Hl)));
}

TEST_CASE("attention refuses mismatched shapes", "[kernels][attention]") {
  using T = float;
  const int B = 2, S = 4, nh = 2, d = 3, Hl = nh * d;
  Exec exec;
  tk::Matrix<T> qkv("qkv", B * S, 3 * Hl), out("out", B * S, Hl), dqkv("dqkv", B * S, 3 * Hl);
  tk::Tensor4<T> probs("probs", B, nh, S, S), wrong("wrong", B, nh, S, S + 1);
  tk::Vector<T> lse("lse", B * nh * S), short_lse("short", B * nh * S - 1);
  CHECK_THROWS_AS(tk::attention_forward(exec, qkv, out, wrong, lse, B, S, nh, d),
                  std::invalid_argument);
  CHECK_THROWS_AS(tk::attention_forward(exec, qkv, out, probs, short_lse, B, S, nh, d),
                  std::invalid_argument);
  CHECK_THROWS_AS(tk::attention_backward(exec, out, qkv, short_lse, dqkv, probs, probs),
                  std::invalid_argument);
  CHECK_THROWS_AS(tk::attention_backward(exec, out, qkv, lse, dqkv, probs, wrong),
                  std::invalid_argument);
  // The row-tile buffer: [B, nh, >= min(S, 128), S].
  tk::Tensor4<T> short_tile("short_tile", B, nh, S - 1, S), wide_tile("wide_tile", B, nh, S, S + 1);
  CHECK_THROWS_AS(tk::attention_backward(exec, out, qkv, lse, dqkv, probs, short_tile),
                  std::invalid_argument);
  CHECK_THROWS_AS(tk::attention_backward(exec, out, qkv, lse, dqkv, probs, wide_tile),
                  std::invalid_argument);
}

// Recomputation "none" keeps the raw scores of the forward and the backward skips its Q Kᵀ
// GEMM: the gradients must be the recomputing backward's bit for bit (the model relies on it:
// every recompute mode gives the same gradients), and the forward output unchanged.
TEMPLATE_TEST_CASE("attention backward from kept scores equals the recomputing backward bit for bit",
                   "[kernels][attention]", float, tptrain::kx::bf16) {
  using T = TestType;
  const AttnShape s = GENERATE(AttnShape{2, 13, 3, 4}, AttnShape{1, 130, 2, 8});
  INFO("B=" << s.B << " S=" << s.S << " nh=" << s.nh << " d=" << s.d);
  const int Hl = s.nh * s.d, rows = s.B * s.S;
  using A = tptrain::kx::acc_t<T>;
  std::mt19937 rng(91);
  Exec exec;
  const auto hqkv = tt::random_vec<float>(rng, static_cast<std::size_t>(rows) * 3 * Hl, -1.5, 1.5);
  const auto hdout = tt::random_vec<float>(rng, static_cast<std::size_t>(rows) * Hl);
  auto qkv = tt::to_device<T>(hqkv, rows, 3 * Hl);
  auto dout = tt::to_device<T>(hdout, rows, Hl);
  const int tile = static_cast<int>(tk::attention_backward_tile_rows(s.S));
  tk::Tensor4<T> probs("probs", s.B, s.nh, s.S, s.S), kept("kept", s.B, s.nh, s.S, s.S),
      dprobs("dprobs", s.B, s.nh, tile, s.S);
  tk::Matrix<A> dkv_sum("dkv_sum", rows, 2 * Hl);
  tk::Matrix<T> out1("out1", rows, Hl), out2("out2", rows, Hl), dqkv1("dqkv1", rows, 3 * Hl),
      dqkv2("dqkv2", rows, 3 * Hl);
  tk::Vector<A> lse1("lse1", static_cast<std::size_t>(rows) * s.nh), lse2("lse2", static_cast<std::size_t>(rows) * s.nh);
  // Recomputing: the forward's probabilities are gone before the backward.
  tk::attention_forward(exec, qkv, out1, probs, lse1, s.B, s.S, s.nh, s.d);
  Kokkos::deep_copy(probs, T(std::numeric_limits<float>::quiet_NaN()));
  tk::attention_backward_tiled(exec, dout, qkv, lse1, dqkv1, probs, dprobs, tile, dkv_sum);
  // Kept: the shared probs buffer is overwritten in between (another layer), the kept scores are not.
  tk::attention_forward(exec, qkv, out2, probs, lse2, s.B, s.S, s.nh, s.d, kept);
  Kokkos::deep_copy(probs, T(std::numeric_limits<float>::quiet_NaN()));
  tk::attention_backward_tiled(exec, dout, qkv, lse2, dqkv2, kept, dprobs, tile, dkv_sum, true);
  exec.fence();
  CHECK(tt::bitwise_equal(tt::to_host(out1), tt::to_host(out2)));
  CHECK(tt::bitwise_equal(tt::to_host(lse1), tt::to_host(lse2)));
  CHECK(tt::bitwise_equal(tt::to_host(dqkv1), tt::to_host(dqkv2)));
  // And it is the gradient: against the naive reference (fp32 only; bf16 has its own tests).
  if constexpr (std::is_same<T, float>::value) {
    const auto rf = tk::ref::attention_forward(hqkv, s.B, s.S, s.nh, s.d);
    const auto rb = tk::ref::attention_backward(hdout, hqkv, rf.att, s.B, s.S, s.nh, s.d);
    CHECK(tt::max_rel_err(tt::to_host(dqkv2), rb) < 4 * tt::tol<T>());
  }
}
