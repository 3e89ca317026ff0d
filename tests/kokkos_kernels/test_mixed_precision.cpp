// The kernels with 16-bit (kx::bf16 / kx::fp16) storage against fp64 references computed on the
// same 16-bit inputs (random_vec<H> rounds them first).
//
// Tolerances. u_H is the unit roundoff of the 16-bit output (bf16 2^-8, fp16 2^-11): one
// rounding to nearest moves a value by at most u_H of its magnitude. Every kernel is meant to
// compute in fp32 and round each output once, so an output must lie within
//   u_H·|ref| (+ the fp32 error of the computation)
// of the fp64 reference. The fp32 part:
//  * GEMMs: the products of two 16-bit values are exact in fp32 (8 + 8 or 11 + 11 significant
//    bits <= 24), so only the K - 1 fp32 additions err, by at most (K - 1)·2^-24·Σ_k |a_k||b_k|
//    in any summation order (Higham, Thm 3.1 to first order); asserted with K + 2 to cover α, β.
//  * row reductions (LayerNorm, softmax, cross-entropy, column sums) of n terms: also
//    ~n·2^-24 relative to the sum of magnitudes; with n <= 256 and inputs of size O(1) that is
//    below 2e-5 of the output scale, the bound used (floor = max |ref|, or the accumulated size).
// An accumulator left in 16 bits errs by ~u_H per addition (2^-9 of the running sum for bf16):
// for sums of 33 to 256 terms that is orders of magnitude above these bounds, so each test
// fails if a kernel sums in its storage type (checked by breaking them one at a time).
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "catch.hpp"
#include "kokkos_kernels/adamw.hpp"
#include "kokkos_kernels/attention.hpp"
#include "kokkos_kernels/batched_gemm.hpp"
#include "kokkos_kernels/bias.hpp"
#include "kokkos_kernels/cross_entropy.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "kokkos_kernels/embedding.hpp"
#include "kokkos_kernels/gelu.hpp"
#include "kokkos_kernels/gemm.hpp"
#include "kokkos_kernels/layernorm.hpp"
#include "kokkos_kernels/precision.hpp"
#include "kokkos_kernels/reductions.hpp"
#include "reference.hpp"
#include "test_util.hpp"
#include "unfused_gelu.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;
namespace kx = tptrain::kx;
using Exec = kx::ExecSpace;

namespace {

template <class H>
constexpr double unit_roundoff() {
  return std::is_same<H, kx::bf16>::value ? 1.0 / 256 : 1.0 / 2048;
}
constexpr double fp32_eps = 1.0 / (1 << 24);  // unit roundoff of float, 2^-24

tt::HostVec abs_of(tt::HostVec v) {
  for (auto& x : v) x = std::fabs(x);
  return v;
}

// Elementwise: |got - ref| <= u·|ref| + abs_err (abs_err a scalar or per element). Reports the
// worst offender.
void check_within(const tt::HostVec& got, const tt::HostVec& ref, const double u,
                  const tt::HostVec& abs_err, const char* what) {
  REQUIRE(got.size() == ref.size());
  std::size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = u * std::fabs(ref[i]) + abs_err[abs_err.size() == 1 ? 0 : i];
    const double ratio = std::fabs(got[i] - ref[i]) / (bound > 0 ? bound : 1e-300);
    if (!(ratio <= 1)) ++bad;
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  INFO(what << ": " << bad << " of " << got.size() << " outside the bound; worst [" << worst
            << "] got " << got[worst] << " ref " << ref[worst] << " (error/bound " << worst_ratio
            << ")");
  CHECK(bad == 0);
}
void check_within(const tt::HostVec& got, const tt::HostVec& ref, const double u,
                  const double abs_err, const char* what) {
  check_within(got, ref, u, tt::HostVec{abs_err}, what);
}

// The fp32 summation error of GEMM outputs: (K + 2)·2^-24 · (Σ|a||b| + |β c|) per element.
tt::HostVec gemm_fp32_err(const tt::HostVec& abs_sum, const int K) {
  tt::HostVec e(abs_sum.size());
  for (std::size_t i = 0; i < e.size(); ++i) e[i] = (K + 2) * fp32_eps * abs_sum[i];
  return e;
}

// Where the fp32 error is at most a quarter of the output's rounding interval, the result must be
// the correctly rounded reference or a neighbour of it (one unit in the last place): at most one
// rounding midpoint can lie between the fp32 sum and the exact one.
template <class H>
void check_one_ulp(const tt::HostVec& got, const tt::HostVec& ref, const tt::HostVec& fp32_err) {
  auto ordinal = [](double v) {
    const H h = static_cast<H>(static_cast<float>(v));
    const int mag = h.bits & 0x7fff;
    return (h.bits & 0x8000) ? -mag : mag;
  };
  std::size_t checked = 0, bad = 0, exact = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (fp32_err[i] > 0.25 * unit_roundoff<H>() * std::fabs(ref[i])) continue;
    ++checked;
    const int d = ordinal(got[i]) - ordinal(ref[i]);
    if (d < -1 || d > 1) ++bad;
    if (d == 0) ++exact;
  }
  INFO(checked << " checked, " << exact << " correctly rounded");
  CHECK(bad == 0);
  CHECK(checked > 0);
  CHECK(exact >= checked * 3 / 4);
}

struct LinearShape {
  int N, in, out;
};

template <class H>
void check_linear_16bit(const LinearShape& s, const unsigned seed) {
  std::mt19937 rng(seed);
  Exec exec;
  const auto hx = tt::random_vec<H>(rng, s.N * s.in);
  const auto hW = tt::random_vec<H>(rng, s.out * s.in);
  const auto hdy = tt::random_vec<H>(rng, s.N * s.out);
  const auto hdW0 = tt::random_vec<float>(rng, s.out * s.in);
  auto x = tt::to_device<H>(hx, s.N, s.in);
  auto W = tt::to_device<H>(hW, s.out, s.in);
  auto dy = tt::to_device<H>(hdy, s.N, s.out);
  auto dW = tt::to_device<float>(hdW0, s.out, s.in);  // the fp32 gradient, accumulated
  auto y = tt::to_device<H>(tt::random_vec<H>(rng, s.N * s.out), s.N, s.out);
  auto dx = tt::to_device<H>(tt::random_vec<H>(rng, s.N * s.in), s.N, s.in);

  tk::linear_forward(exec, x, W, y);
  tk::linear_backward_input(exec, dy, W, dx);
  tk::linear_backward_weight(exec, dy, x, dW);
  exec.fence();

  const auto ref_y = tk::ref::linear_forward(hx, hW, s.N, s.in, s.out);
  const auto err_y =
      gemm_fp32_err(tk::ref::linear_forward(abs_of(hx), abs_of(hW), s.N, s.in, s.out), s.in);
  check_within(tt::to_host(y), ref_y, unit_roundoff<H>(), err_y, "linear_forward");
  check_one_ulp<H>(tt::to_host(y), ref_y, err_y);

  const auto ref_dx = tk::ref::linear_backward_input(hdy, hW, s.N, s.in, s.out);
  const auto err_dx = gemm_fp32_err(
      tk::ref::linear_backward_input(abs_of(hdy), abs_of(hW), s.N, s.in, s.out), s.out);
  check_within(tt::to_host(dx), ref_dx, unit_roundoff<H>(), err_dx, "linear_backward_input");
  check_one_ulp<H>(tt::to_host(dx), ref_dx, err_dx);

  // dW float: fp32 sums added once to the float dW0 (one more fp32 rounding, no 16-bit one).
  auto ref_dW = hdW0, size_dW = abs_of(hdW0);
  tk::ref::linear_backward_weight(hdy, hx, s.N, s.in, s.out, ref_dW);
  tk::ref::linear_backward_weight(abs_of(hdy), abs_of(hx), s.N, s.in, s.out, size_dW);
  check_within(tt::to_host(dW), ref_dW, 0.0, gemm_fp32_err(size_dW, s.N), "linear_backward_weight");
}

// Strided-batched GEMM reference in double (row-major, ld, batch strides), and Σ|a||b| + |β c|.
struct GemmRef {
  tt::HostVec value, size;
};
GemmRef naive_batched(char ta, char tb, int M, int N, int K, double alpha, const tt::HostVec& A,
                      int lda, int sA, const tt::HostVec& B, int ldb, int sB, double beta,
                      const tt::HostVec& C, int ldc, int sC, int batch) {
  GemmRef r{C, tt::HostVec(C.size(), 0.0)};
  for (int i = 0; i < batch; ++i)
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double s = 0, a = 0;
        for (int k = 0; k < K; ++k) {
          const double x = ta == 'N' ? A[i * sA + m * lda + k] : A[i * sA + k * lda + m];
          const double y = tb == 'N' ? B[i * sB + k * ldb + n] : B[i * sB + n * ldb + k];
          s += x * y;
          a += std::fabs(x * y);
        }
        const std::size_t c = static_cast<std::size_t>(i) * sC + m * ldc + n;
        r.value[c] = alpha * s + (beta == 0 ? 0.0 : beta * C[c]);
        r.size[c] = std::fabs(alpha) * a + std::fabs(beta * C[c]);
      }
  return r;
}

template <class T>
Kokkos::View<T*, kx::MemSpace> flat(const tt::HostVec& h) {
  return tt::to_device<T>(h, "flat");
}

// One batched_gemm (or its portable fallback) on 16-bit A, B and a C of type TC.
template <class H, class TC>
void check_batched_16bit(const char ta, const char tb, const bool portable, const double beta) {
  const int M = 6, N = 9, K = 70, batch = 3;
  const double alpha = 0.5;
  const int rowsA = ta == 'N' ? M : K, colsA = ta == 'N' ? K : M;
  const int rowsB = tb == 'N' ? K : N, colsB = tb == 'N' ? N : K;
  const int lda = colsA + 3, ldb = colsB + 2, ldc = N + 4;
  const int sA = rowsA * lda + 5, sB = rowsB * ldb + 1, sC = M * ldc + 7;
  std::mt19937 rng(11);
  const auto hA = tt::random_vec<H>(rng, static_cast<std::size_t>(sA) * batch);
  const auto hB = tt::random_vec<H>(rng, static_cast<std::size_t>(sB) * batch);
  const auto hC = tt::random_vec<H>(rng, static_cast<std::size_t>(sC) * batch, -4, 4);
  const auto ref =
      naive_batched(ta, tb, M, N, K, alpha, hA, lda, sA, hB, ldb, sB, beta, hC, ldc, sC, batch);
  auto A = flat<H>(hA);
  auto B = flat<H>(hB);
  auto C = flat<TC>(hC);
  Exec exec;
  if (portable)
    tk::detail::batched_gemm_kokkos<Exec, H>(exec, ta, tb, M, N, K, alpha, A.data(), lda, sA,
                                             B.data(), ldb, sB, beta, C.data(), ldc, sC, batch);
  else
    tk::batched_gemm<Exec, H>(exec, ta, tb, M, N, K, alpha, A.data(), lda, sA, B.data(), ldb, sB,
                              beta, C.data(), ldc, sC, batch);
  exec.fence();
  const auto got = tt::to_host(C);
  tt::HostVec g, r, e;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::size_t in = i % sC;
    const bool inside = static_cast<int>(in) < M * ldc && static_cast<int>(in % ldc) < N;
    if (!inside) {
      CHECK(got[i] == hC[i]);  // ld and stride padding untouched
      continue;
    }
    g.push_back(got[i]);
    r.push_back(ref.value[i]);
    e.push_back((K + 2) * fp32_eps * ref.size[i]);
  }
  constexpr bool c16 = kx::is_half_v<TC>;
  check_within(g, r, c16 ? unit_roundoff<H>() : 0.0, e, "batched_gemm");
  if (c16) check_one_ulp<H>(g, r, e);
}

}  // namespace

TEMPLATE_TEST_CASE("16-bit linear layers: fp32 accumulation, one rounding",
                   "[kernels][precision][gemm]", kx::bf16, kx::fp16) {
  const LinearShape shape = GENERATE(LinearShape{33, 96, 40}, LinearShape{7, 300, 5},
                                     LinearShape{1, 1, 1}, LinearShape{64, 128, 96});
  INFO("N=" << shape.N << " in=" << shape.in << " out=" << shape.out);
  check_linear_16bit<TestType>(shape, 99u + static_cast<unsigned>(shape.in));
}

TEST_CASE("16-bit linear layers: subviews, empty dimensions, accumulation",
          "[kernels][precision][gemm]") {
  using H = kx::bf16;
  Exec exec;
  std::mt19937 rng(5);
  const int N = 6, in = 8, out = 3;
  const auto hx = tt::random_vec<H>(rng, N * (in + 4));
  auto xw = tt::to_device<H>(hx, N, in + 4);
  auto xs = Kokkos::subview(xw, Kokkos::ALL, Kokkos::make_pair(2, 2 + in));  // ld = in + 4
  const auto hW = tt::random_vec<H>(rng, out * in);
  auto W = tt::to_device<H>(hW, out, in);
  tk::Matrix<H> y("y", N, out);
  tk::linear_forward(exec, xs, W, y);
  tt::HostVec hxs;
  for (int t = 0; t < N; ++t)
    for (int k = 0; k < in; ++k) hxs.push_back(hx[t * (in + 4) + 2 + k]);
  const auto ref = tk::ref::linear_forward(hxs, hW, N, in, out);
  check_within(tt::to_host(y), ref, unit_roundoff<H>(),
               gemm_fp32_err(tk::ref::linear_forward(abs_of(hxs), abs_of(hW), N, in, out), in),
               "column-block x");
  // Two micro-batches into one float dW equal one call over both (up to fp32 rounding).
  const auto hdy = tt::random_vec<H>(rng, 2 * N * out);
  auto dy = tt::to_device<H>(hdy, 2 * N, out);
  auto x2 = tt::to_device<H>(tt::random_vec<H>(rng, 2 * N * in), 2 * N, in);
  tk::Matrix<float> whole("whole", out, in), two("two", out, in);
  tk::linear_backward_weight(exec, dy, x2, whole);
  for (int mb = 0; mb < 2; ++mb) {
    const auto rows = Kokkos::make_pair(mb * N, (mb + 1) * N);
    tk::linear_backward_weight(exec, Kokkos::subview(dy, rows, Kokkos::ALL),
                               Kokkos::subview(x2, rows, Kokkos::ALL), two);
  }
  exec.fence();
  CHECK(tt::max_rel_err(tt::to_host(two), tt::to_host(whole)) < 1e-5);
  // Empty inner dimension: y = 0.
  tk::Matrix<H> x0("x0", N, 0), W0("W0", out, 0);
  tk::Matrix<H> y0("y0", N, out);
  Kokkos::deep_copy(y0, H(3.0f));
  tk::linear_forward(exec, x0, W0, y0);
  exec.fence();
  CHECK(tt::max_abs(tt::to_host(y0)) == 0);
}

TEMPLATE_TEST_CASE("16-bit batched_gemm: fp32 accumulation, one rounding",
                   "[kernels][precision][gemm]", kx::bf16, kx::fp16) {
  using H = TestType;
  const char ta = GENERATE('N', 'T'), tb = GENERATE('N', 'T');
  const bool portable = GENERATE(false, true);
  const double beta = GENERATE(0.0, 1.0, -0.75);
  INFO("op " << ta << tb << (portable ? " kokkos fallback" : " batched_gemm") << " beta " << beta);
  check_batched_16bit<H, H>(ta, tb, portable, beta);
  check_batched_16bit<H, float>(ta, tb, portable, beta);
}

TEST_CASE("bf16 LayerNorm: fp32 statistics, outputs rounded once",
          "[kernels][precision][layernorm]") {
  using H = kx::bf16;
  Exec exec;
  std::mt19937 rng(3);
  const int N = 70, Hd = 192;  // N > 64: the column sums take their two-stage path
  const double eps = 1e-5;
  // An offset mean (x in [-1, 3)): a 16-bit sum of 192 such values would be off by whole units.
  const auto hx = tt::random_vec<H>(rng, N * Hd, -1.0, 3.0);
  const auto hg = tt::random_vec<H>(rng, Hd, 0.5, 1.5);
  const auto hb = tt::random_vec<H>(rng, Hd);
  const auto hdy = tt::random_vec<H>(rng, N * Hd);
  auto x = tt::to_device<H>(hx, N, Hd);
  auto gamma = tt::to_device<H>(hg), beta = tt::to_device<H>(hb);
  tk::Matrix<H> y("y", N, Hd), dx("dx", N, Hd);
  tk::Vector<float> mean("mean", N), rstd("rstd", N);
  tk::layernorm_forward(exec, x, gamma, beta, y, mean, rstd, static_cast<float>(eps));
  const auto f = tk::ref::layernorm_forward(hx, hg, hb, N, Hd, eps);
  exec.fence();
  check_within(tt::to_host(mean), f.mean, 0.0, 2e-5 * tt::max_abs(hx), "mean");
  check_within(tt::to_host(rstd), f.rstd, 2e-5, 0.0, "rstd");
  check_within(tt::to_host(y), f.y, unit_roundoff<H>(), 2e-5 * tt::max_abs(f.y), "y");

  auto dy = tt::to_device<H>(hdy, N, Hd);
  const auto hdg0 = tt::random_vec<float>(rng, Hd), hdb0 = tt::random_vec<float>(rng, Hd);
  auto dgamma = tt::to_device<float>(hdg0), dbeta = tt::to_device<float>(hdb0);
  tk::layernorm_backward(exec, dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
  exec.fence();
  auto g = tk::ref::layernorm_backward(hdy, hx, hg, N, Hd, eps);
  check_within(tt::to_host(dx), g.dx, unit_roundoff<H>(), 2e-5 * tt::max_abs(g.dx), "dx");
  for (int j = 0; j < Hd; ++j) {
    g.dgamma[j] += hdg0[j];
    g.dbeta[j] += hdb0[j];
  }
  // Sums of N = 70 terms |dy·x̂| < 2 (|x̂| <= 2/std(U[-1,3]) = 1.73) added to |dγ0| < 1: fp32
  // error <= (N + 2)·2^-24·(2N + 1) in any order.
  const double sum_err = (N + 2) * fp32_eps * (2 * N + 1);
  check_within(tt::to_host(dgamma), g.dgamma, 0.0, sum_err, "dgamma");
  check_within(tt::to_host(dbeta), g.dbeta, 0.0, sum_err, "dbeta");

  // The fused residual add: x1 = x + r rounded once, normalised as stored.
  const auto hr = tt::random_vec<H>(rng, N * Hd);
  auto r = tt::to_device<H>(hr, N, Hd);
  tk::Matrix<H> x1("x1", N, Hd), y1("y1", N, Hd);
  tk::add_layernorm_forward(exec, x, r, x1, gamma, beta, y1, mean, rstd, static_cast<float>(eps));
  exec.fence();
  tt::HostVec hx1(hx.size());
  for (std::size_t i = 0; i < hx.size(); ++i)
    hx1[i] = static_cast<double>(static_cast<float>(H(static_cast<float>(hx[i] + hr[i]))));
  CHECK(tt::to_host(x1) == hx1);
  const auto f1 = tk::ref::layernorm_forward(hx1, hg, hb, N, Hd, eps);
  check_within(tt::to_host(y1), f1.y, unit_roundoff<H>(), 2e-5 * tt::max_abs(f1.y),
               "add_layernorm y");
}

TEST_CASE("bf16 causal softmax: fp32 max/exp/sum, probabilities rounded once",
          "[kernels][precision][attention]") {
  using H = kx::bf16;
  Exec exec;
  std::mt19937 rng(8);
  const int B = 2, nh = 2, S = 150;  // rows of up to 150 terms
  const double scale = 1.0 / std::sqrt(64.0);
  // Unscaled scores of size ~|q·k| for d = 64: the scaled ones span [-3, 3).
  const auto hs = tt::random_vec<H>(rng, static_cast<std::size_t>(B) * nh * S * S, -24.0, 24.0);
  Kokkos::View<H****, Kokkos::LayoutRight, kx::MemSpace> probs("probs", B, nh, S, S);
  {
    auto m = Kokkos::create_mirror_view(probs);
    for (std::size_t i = 0; i < hs.size(); ++i) m.data()[i] = H(static_cast<float>(hs[i]));
    Kokkos::deep_copy(probs, m);
  }
  tk::Vector<float> lse("lse", B * nh * S);
  tk::causal_softmax_forward(exec, probs, lse, static_cast<float>(scale));
  exec.fence();
  tt::HostVec ref_p(hs.size(), 0.0), ref_lse(B * nh * S);
  for (int r = 0; r < B * nh * S; ++r) {
    const int i = r % S;
    const double* s = hs.data() + static_cast<std::size_t>(r) * S;
    double m = -1e300, z = 0;
    for (int j = 0; j <= i; ++j) m = std::max(m, scale * s[j]);
    for (int j = 0; j <= i; ++j) z += std::exp(scale * s[j] - m);
    for (int j = 0; j <= i; ++j)
      ref_p[static_cast<std::size_t>(r) * S + j] = std::exp(scale * s[j] - m) / z;
    ref_lse[r] = m + std::log(z);
  }
  // P: one bf16 rounding (u·|P|) plus the fp32 error of exp and of the row sum (each P relative:
  // a few ulp of exp, <= 150·2^-24 of the sum; 2e-5 |P| covers both). A P rounded twice (exp,
  // then the normalised value) errs by up to 2u|P| and misses the bound.
  check_within(tt::to_host(probs), ref_p, unit_roundoff<H>() + 2e-5, 0.0, "P");
  check_within(tt::to_host(lse), ref_lse, 2e-6, 2e-6, "lse");

  // The backward's recompute from lse, then the softmax backward on bf16 P and dP.
  Kokkos::View<H****, Kokkos::LayoutRight, kx::MemSpace> again("again", B, nh, S, S),
      dprobs("dp", B, nh, S, S);
  {
    auto m = Kokkos::create_mirror_view(again);
    for (std::size_t i = 0; i < hs.size(); ++i) m.data()[i] = H(static_cast<float>(hs[i]));
    Kokkos::deep_copy(again, m);
  }
  tk::causal_softmax_recompute(exec, again, lse, static_cast<float>(scale));
  exec.fence();
  check_within(tt::to_host(again), ref_p, unit_roundoff<H>() + 2e-5, 0.0, "recomputed P");

  const auto hp = tt::to_host(probs);  // the bf16 P the backward reads
  const auto hdp = tt::random_vec<H>(rng, hs.size());
  {
    auto m = Kokkos::create_mirror_view(dprobs);
    for (std::size_t i = 0; i < hdp.size(); ++i) m.data()[i] = H(static_cast<float>(hdp[i]));
    Kokkos::deep_copy(dprobs, m);
  }
  tk::causal_softmax_backward(exec, probs, dprobs, static_cast<float>(scale));
  exec.fence();
  tt::HostVec ref_ds(hs.size(), 0.0);
  for (int r = 0; r < B * nh * S; ++r) {
    const int i = r % S;
    const std::size_t o = static_cast<std::size_t>(r) * S;
    double dot = 0;
    for (int j = 0; j <= i; ++j) dot += hp[o + j] * hdp[o + j];
    for (int j = 0; j <= i; ++j) ref_ds[o + j] = scale * hp[o + j] * (hdp[o + j] - dot);
  }
  // dS = scale·P·(dP - Σ P dP): the fp32 error of the dot (Σ P = 1, |dP| < 1) is < 2e-5 in
  // dP - dot, times scale·P.
  tt::HostVec err(hs.size());
  for (std::size_t k = 0; k < err.size(); ++k) err[k] = 2e-5 * scale * hp[k];
  check_within(tt::to_host(dprobs), ref_ds, unit_roundoff<H>(), err, "dS");
}

TEST_CASE("bf16 attention forward and backward against fp64", "[kernels][precision][attention]") {
  // End to end with bf16 Q, K, V, scores, P and outputs (each stored value rounded once, about
  // 2^-9 relative, through two GEMMs and a softmax): a normwise 2^-5 bound. This checks that the
  // pieces fit together in 16 bits; the per-piece bounds above are the tight ones.
  using H = kx::bf16;
  Exec exec;
  std::mt19937 rng(21);
  const int B = 2, S = 130, nh = 2, d = 16, Hl = nh * d;  // S > 128: two causal tiles
  const auto hqkv = tt::random_vec<H>(rng, static_cast<std::size_t>(B) * S * 3 * Hl);
  const auto hdo = tt::random_vec<H>(rng, static_cast<std::size_t>(B) * S * Hl);
  auto qkv = tt::to_device<H>(hqkv, B * S, 3 * Hl);
  auto dout = tt::to_device<H>(hdo, B * S, Hl);
  tk::Matrix<H> out("out", B * S, Hl), dqkv("dqkv", B * S, 3 * Hl);
  tk::Vector<float> lse("lse", B * nh * S);
  tk::attention_forward(exec, qkv, out, lse, B, S, nh, d);
  tk::attention_backward(exec, dout, qkv, lse, dqkv, B, S, nh);
  exec.fence();
  const auto ref = tk::ref::attention_forward(hqkv, B, S, nh, d);
  const auto ref_d = tk::ref::attention_backward(hdo, hqkv, ref.att, B, S, nh, d);
  CHECK(tt::max_rel_err(tt::to_host(out), ref.out) < 1.0 / 32);
  CHECK(tt::max_rel_err(tt::to_host(dqkv), ref_d) < 1.0 / 32);
}

TEST_CASE("bf16 attention backward: dK summed over query row tiles in fp32 is rounded once",
          "[kernels][precision][attention]") {
  // One row tile is the untiled backward: dK = dSᵀ Q in one GEMM, rounded once. With S tiles of
  // one row, dK is a sum of S GEMMs: summed in the fp32 workspace it is rounded once again and
  // equals the one-tile result up to fp32 summation order (at most one bf16 ulp where that order
  // crosses a rounding midpoint); summed in bf16 it would be rounded S times.
  using H = kx::bf16;
  Exec exec;
  std::mt19937 rng(33);
  const int B = 2, S = 48, nh = 2, d = 8, Hl = nh * d;
  auto qkv = tt::to_device<H>(tt::random_vec<H>(rng, static_cast<std::size_t>(B) * S * 3 * Hl), B * S, 3 * Hl);
  auto dout = tt::to_device<H>(tt::random_vec<H>(rng, static_cast<std::size_t>(B) * S * Hl), B * S, Hl);
  tk::Matrix<H> out("out", B * S, Hl), one("one", B * S, 3 * Hl), summed("summed", B * S, 3 * Hl),
      rounded("rounded", B * S, 3 * Hl);
  tk::Matrix<float> dkv_sum("dkv_sum", B * S, 2 * Hl);
  tk::Vector<float> lse("lse", B * nh * S);
  tk::Tensor4<H> probs("probs", B, nh, S, S), dprobs("dprobs", B, nh, S, S);
  tk::attention_forward(exec, qkv, out, lse, B, S, nh, d);
  tk::attention_backward_tiled(exec, dout, qkv, lse, one, probs, dprobs, S);
  tk::attention_backward_tiled(exec, dout, qkv, lse, summed, probs, dprobs, 1, dkv_sum);
  tk::attention_backward_tiled(exec, dout, qkv, lse, rounded, probs, dprobs, 1);
  exec.fence();
  const auto h_one = tt::to_host(one), h_summed = tt::to_host(summed), h_rounded = tt::to_host(rounded);
  const double u = unit_roundoff<H>();
  double worst_summed = 0, worst_rounded = 0;  // in units of the one-tile value's rounding
  for (int r = 0; r < B * S; ++r)
    for (int c = Hl; c < 2 * Hl; ++c) {  // the K block
      const std::size_t i = static_cast<std::size_t>(r) * 3 * Hl + static_cast<std::size_t>(c);
      const double unit = std::max(u * std::fabs(h_one[i]), 1e-30);
      worst_summed = std::max(worst_summed, std::fabs(h_summed[i] - h_one[i]) / unit);
      worst_rounded = std::max(worst_rounded, std::fabs(h_rounded[i] - h_one[i]) / unit);
    }
  INFO("dK, in bf16 roundings of the one-tile value: fp32 workspace " << worst_summed << ", bf16 sum over "
                                                                        << S << " tiles " << worst_rounded);
  CHECK(worst_summed <= 2.0);  // one ulp is 2u relative at most
  CHECK(worst_rounded > worst_summed);
}

TEST_CASE("bf16 cross-entropy: fp32 max, sum-exp and loss", "[kernels][precision][cross_entropy]") {
  using H = kx::bf16;
  Exec exec;
  std::mt19937 rng(4);
  const int N = 9, V = 250;
  // Logits offset to [2, 10): a 16-bit sum of 250 exps (sum ~ 250·e^-3) would be off by %.
  const auto hl = tt::random_vec<H>(rng, N * V, 2.0, 10.0);
  std::vector<int> targets(N);
  for (int t = 0; t < N; ++t) targets[t] = static_cast<int>(rng() % V);
  auto logits = tt::to_device<H>(hl, N, V);
  auto tg = tt::tokens_to_device(targets);
  tk::Vector<float> rowmax("rowmax", N), sumexp("sumexp", N), tl("tl", N), loss("loss", N);
  tk::Matrix<H> dlogits("dlogits", N, V);
  const double scale = 1.0 / N;
  tk::row_max(exec, logits, V, rowmax);
  tk::row_sum_exp(exec, logits, rowmax, V, sumexp);
  tk::target_logit(exec, logits, tg, 0, tl);
  tk::cross_entropy_loss(exec, rowmax, sumexp, tl, loss);
  tk::cross_entropy_backward(exec, logits, rowmax, sumexp, tg, 0, V, static_cast<float>(scale),
                             dlogits);
  exec.fence();
  const auto ref = tk::ref::cross_entropy(hl, targets, N, V, scale);
  tt::HostVec ref_max(N), ref_sum(N, 0.0), ref_tl(N);
  for (int t = 0; t < N; ++t) {
    ref_max[t] = *std::max_element(hl.begin() + t * V, hl.begin() + (t + 1) * V);
    for (int v = 0; v < V; ++v) ref_sum[t] += std::exp(hl[t * V + v] - ref_max[t]);
    ref_tl[t] = hl[t * V + targets[t]];
  }
  CHECK(tt::to_host(rowmax) == ref_max);  // a max of bf16 values: exact
  CHECK(tt::to_host(tl) == ref_tl);
  check_within(tt::to_host(sumexp), ref_sum, 2e-5, 0.0, "sumexp");
  check_within(tt::to_host(loss), ref.loss, 0.0, 2e-5 * (1 + tt::max_abs(ref.loss)), "loss");
  // dlogits = scale (softmax - onehot): one rounding, plus the fp32 error of exp / sumexp.
  check_within(tt::to_host(dlogits), ref.dlogits, unit_roundoff<H>(), 2e-5 * scale, "dlogits");
}

TEST_CASE("bf16 elementwise, bias, GELU and embedding kernels", "[kernels][precision]") {
  using H = kx::bf16;
  const double u = unit_roundoff<H>();
  Exec exec;
  std::mt19937 rng(6);
  const int N = 80, F = 24, V = 11;
  const auto ha = tt::random_vec<H>(rng, N * F, -3, 3), hb = tt::random_vec<H>(rng, N * F);
  auto a = tt::to_device<H>(ha, N, F), b = tt::to_device<H>(hb, N, F);

  // convert: float -> bf16 rounds to nearest even, bf16 -> float and -> fp16 as defined.
  const auto hf = tt::random_vec<float>(rng, N * F, -100, 100);
  auto f32 = tt::to_device<float>(hf, N, F);
  tk::Matrix<H> c16("c16", N, F);
  tk::Matrix<float> back("back", N, F);
  tk::Matrix<kx::fp16> h16("h16", N, F);
  tk::convert(exec, f32, c16);
  tk::convert(exec, c16, back);
  tk::convert(exec, c16, h16);
  exec.fence();
  tt::HostVec want16(hf.size()), want_fp16(hf.size());
  for (std::size_t i = 0; i < hf.size(); ++i) {
    want16[i] = static_cast<float>(H(static_cast<float>(hf[i])));
    want_fp16[i] = static_cast<float>(kx::fp16(static_cast<float>(want16[i])));
  }
  CHECK(tt::to_host(c16) == want16);
  CHECK(tt::to_host(back) == want16);
  CHECK(tt::to_host(h16) == want_fp16);

  // add / scale: computed in float, rounded once.
  tk::Matrix<H> sum("sum", N, F);
  tk::add(exec, a, b, sum);
  tk::scale(exec, b, 0.3f);
  exec.fence();
  tt::HostVec want_sum(ha.size()), want_scaled(ha.size());
  for (std::size_t i = 0; i < ha.size(); ++i) {
    want_sum[i] = static_cast<float>(H(static_cast<float>(ha[i] + hb[i])));
    want_scaled[i] = static_cast<float>(H(static_cast<float>(hb[i]) * 0.3f));
  }
  CHECK(tt::to_host(sum) == want_sum);
  CHECK(tt::to_host(b) == want_scaled);
  CHECK(tk::all_finite(exec, a));
  CHECK(std::fabs(tk::squared_norm(exec, a) - tt::dot(ha, ha)) < 1e-9 * tt::dot(ha, ha));

  // bias: y += b in float, rounded once; db (float) = fp32 column sums of bf16 dy.
  const auto hbias = tt::random_vec<H>(rng, F);
  auto bias = tt::to_device<H>(hbias);
  tk::Matrix<H> yb("yb", N, F);
  Kokkos::deep_copy(yb, a);
  tk::bias_add(exec, yb, bias);
  tk::Vector<float> db("db", F);
  tk::bias_backward(exec, a, db);
  exec.fence();
  tt::HostVec want_yb(ha.size()), want_db(F, 0.0);
  for (int t = 0; t < N; ++t)
    for (int j = 0; j < F; ++j) {
      want_yb[t * F + j] = static_cast<float>(H(static_cast<float>(ha[t * F + j] + hbias[j])));
      want_db[j] += ha[t * F + j];
    }
  CHECK(tt::to_host(yb) == want_yb);
  check_within(tt::to_host(db), want_db, 0.0, (N + 1) * fp32_eps * 3 * N, "db");

  // GELU forward/backward in float from bf16 inputs, rounded once (+ fp32 exp error).
  tk::Matrix<H> g("g", N, F), dg("dg", N, F);
  tt::gelu_forward(exec, a, g);
  tt::gelu_backward(exec, b, a, dg);
  exec.fence();
  const auto hb2 = tt::to_host(b);
  tt::HostVec want_g(ha.size()), want_dg(ha.size());
  for (std::size_t i = 0; i < ha.size(); ++i) {
    want_g[i] = tk::ref::gelu(ha[i]);
    want_dg[i] = hb2[i] * tk::ref::gelu_grad(ha[i]);
  }
  check_within(tt::to_host(g), want_g, u, 1e-5, "gelu");
  check_within(tt::to_host(dg), want_dg, u, 1e-5, "gelu'");

  // Embedding: bf16 rows copied exactly; the float gradients sum bf16 dy in float.
  const auto hw = tt::random_vec<H>(rng, V * F);
  auto wte = tt::to_device<H>(hw, V, F);
  std::vector<int> tok(N);
  for (int t = 0; t < N; ++t) tok[t] = static_cast<int>(rng() % V);
  auto tokens = tt::tokens_to_device(tok);
  tk::Matrix<H> emb("emb", N, F);
  tk::embedding_forward_masked(exec, tokens, wte, 0, emb);
  tk::Matrix<float> dw("dw", V, F), dwpe("dwpe", 8, F);
  tk::TokenSegments seg(N);
  seg.build(exec, tok.data(), N);
  tk::embedding_backward_masked(exec, seg, a, 0, dw);
  tk::position_embedding_backward(exec, a, 8, dwpe);
  exec.fence();
  tt::HostVec want_emb(N * F), want_dw(V * F, 0.0), want_dwpe(8 * F, 0.0);
  for (int t = 0; t < N; ++t)
    for (int j = 0; j < F; ++j) {
      want_emb[t * F + j] = hw[tok[t] * F + j];
      want_dw[tok[t] * F + j] += ha[t * F + j];
      want_dwpe[(t % 8) * F + j] += ha[t * F + j];
    }
  CHECK(tt::to_host(emb) == want_emb);
  check_within(tt::to_host(dw), want_dw, 0.0, 3 * N * N * fp32_eps, "dwte");
  check_within(tt::to_host(dwpe), want_dwpe, 0.0, 3 * N * N * fp32_eps, "dwpe");
}

TEST_CASE("bf16 fused bias-GELU and AdamW with 16-bit gradients", "[kernels][precision]") {
  using H = kx::bf16;
  const double u = unit_roundoff<H>();
  Exec exec;
  std::mt19937 rng(12);
  const int N = 40, F = 32;
  const auto hh = tt::random_vec<H>(rng, N * F, -4, 4), hbias = tt::random_vec<H>(rng, F);
  const auto hdy = tt::random_vec<H>(rng, N * F);
  auto bias = tt::to_device<H>(hbias);
  auto dy = tt::to_device<H>(hdy, N, F);
  tt::HostVec hb(N * F);  // h + bias, rounded once as bias_gelu_forward stores it
  for (int t = 0; t < N; ++t)
    for (int j = 0; j < F; ++j)
      hb[t * F + j] = static_cast<float>(H(static_cast<float>(hh[t * F + j] + hbias[j])));
  tt::HostVec want_a(hb.size()), want_dx(hb.size());
  for (std::size_t i = 0; i < hb.size(); ++i) {
    want_a[i] = tk::ref::gelu(hb[i]);
    want_dx[i] = hdy[i] * tk::ref::gelu_grad(hb[i]);
  }
  // sig in float (σ to fp32) and in bf16 (σ rounded: a carries one more rounding, u·|a|).
  auto run = [&](auto sig, const double u_sig) {
    auto h = tt::to_device<H>(hh, N, F);
    tk::Matrix<H> a("a", N, F), a2("a2", N, F), dx("dx", N, F);
    tk::bias_gelu_forward(exec, h, bias, a, sig);
    tk::gelu_from_sigmoid(exec, h, sig, a2);
    tk::gelu_backward_from_sigmoid(exec, dy, h, sig, dx);
    exec.fence();
    CHECK(tt::to_host(h) == hb);
    CHECK(tt::to_host(a2) == tt::to_host(a));  // the recomputed activation is bitwise the forward's
    check_within(tt::to_host(a), want_a, u + u_sig, 1e-5, "bias_gelu a");
    // (gelu' is not relative-stable in σ: its error bound only holds for a float σ.)
    if (u_sig == 0) check_within(tt::to_host(dx), want_dx, u, 1e-5, "gelu_backward_from_sigmoid");
  };
  run(tk::Matrix<float>("sig", N, F), 0.0);
  run(tk::Matrix<H>("sig16", N, F), u);

  // AdamW on float master weights with a bf16 gradient: the gradient widens exactly, so the
  // update is bitwise the one with the same gradient stored in float.
  const int n = 100;
  const auto hp = tt::random_vec<float>(rng, n), hg = tt::random_vec<H>(rng, n);
  auto p16 = tt::to_device<float>(hp), p32 = tt::to_device<float>(hp);
  auto g16 = tt::to_device<H>(hg);
  auto g32 = tt::to_device<float>(hg);
  tk::Vector<float> m16("m16", n), v16("v16", n), m32("m32", n), v32("v32", n);
  for (int step = 1; step <= 3; ++step) {
    tk::adamw_update(exec, p16, g16, m16, v16, 1e-2, 0.9, 0.999, 1e-8, 0.1, step);
    tk::adamw_update(exec, p32, g32, m32, v32, 1e-2, 0.9, 0.999, 1e-8, 0.1, step);
  }
  exec.fence();
  CHECK(tt::to_host(p16) == tt::to_host(p32));
  CHECK(tt::to_host(v16) == tt::to_host(v32));
}
