// The llama block's kernels (issue 23, item 3) against naive double references, forward and
// backward, in fp32 and bf16: RMSNorm (rmsnorm.hpp), SiLU·mul (swiglu.hpp), rotary embeddings in
// the rotate-half convention (rope.hpp) and grouped-query attention (repeat_kv_reference.hpp around the
// attention kernels). Every backward is checked against central finite differences of the double
// reference forward, which shares no formula with the kernel's backward.
#include <cmath>
#include <vector>

#include "catch.hpp"
#include "kokkos_kernels/attention.hpp"
#include "repeat_kv_reference.hpp"
#include "kokkos_kernels/rmsnorm.hpp"
#include "kokkos_kernels/rope.hpp"
#include "kokkos_kernels/swiglu.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;
namespace kx = tptrain::kx;
using Exec = kx::ExecSpace;

namespace {

// Normwise tolerances: fp32 as the other kernel tests; bf16 outputs are rounded once (2^-9
// relative), a little more where a sum of rounded terms feeds them.
template <class T>
double tolerance() {
  return std::is_same<T, kx::bf16>::value ? 1.0 / 128 : 2e-5;
}

// ---- naive double references ------------------------------------------------------------------

tt::HostVec rmsnorm_ref(const tt::HostVec& x, const tt::HostVec& w, int n, int h, double eps, tt::HostVec* rstd = nullptr) {
  tt::HostVec y(x.size());
  if (rstd) rstd->assign(static_cast<std::size_t>(n), 0.0);
  for (int i = 0; i < n; ++i) {
    double sq = 0;
    for (int j = 0; j < h; ++j) sq += x[i * h + j] * x[i * h + j];
    const double r = 1.0 / std::sqrt(sq / h + eps);
    if (rstd) (*rstd)[i] = r;
    for (int j = 0; j < h; ++j) y[i * h + j] = x[i * h + j] * r * w[j];
  }
  return y;
}

tt::HostVec silu_mul_ref(const tt::HostVec& hgu, int n, int f) {
  tt::HostVec a(static_cast<std::size_t>(n) * f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < f; ++j) {
      const double g = hgu[i * 2 * f + j], u = hgu[i * 2 * f + f + j];
      a[i * f + j] = g / (1.0 + std::exp(-g)) * u;
    }
  return a;
}

// Rotate-half RoPE of the first `heads` heads of each row of x [n, cols], position row mod s:
// head h's d features at columns h·stride + offset (stride 0: d). Rotation by angles p·ω_i,
// scaled by the amplitude a (a scaled RoPE's tables carry it).
tt::HostVec rope_ref(tt::HostVec x, int n, int cols, int heads, int d, int s, const std::vector<double>& omega,
                     double a, int stride = 0, int offset = 0) {
  if (stride == 0) stride = d;
  for (int r = 0; r < n; ++r)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < d / 2; ++i) {
        const double angle = (r % s) * omega[i];
        const int j = r * cols + h * stride + offset + i, k = j + d / 2;
        const double xa = x[j], xb = x[k];
        x[j] = a * (xa * std::cos(angle) - xb * std::sin(angle));
        x[k] = a * (xb * std::cos(angle) + xa * std::sin(angle));
      }
  return x;
}

// Causal grouped-query attention straight from the definition: grouped [B·S, (nh + 2nkv)·d],
// query head h reads key/value head h / (nh/nkv); the context [B·S, nh·d].
tt::HostVec gqa_attention_ref(const tt::HostVec& qkv, int B, int S, int nh, int nkv, int d) {
  const int cols = (nh + 2 * nkv) * d, g = nh / nkv;
  tt::HostVec out(static_cast<std::size_t>(B) * S * nh * d, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < nh; ++h) {
      const int kh = h / g;
      for (int i = 0; i < S; ++i) {
        const double* q = &qkv[(b * S + i) * cols + h * d];
        std::vector<double> p(static_cast<std::size_t>(i) + 1);
        double m = -1e300;
        for (int j = 0; j <= i; ++j) {
          const double* k = &qkv[(b * S + j) * cols + nh * d + kh * d];
          double dot = 0;
          for (int e = 0; e < d; ++e) dot += q[e] * k[e];
          p[j] = dot / std::sqrt(double(d));
          m = std::max(m, p[j]);
        }
        double z = 0;
        for (int j = 0; j <= i; ++j) z += (p[j] = std::exp(p[j] - m));
        for (int j = 0; j <= i; ++j) {
          const double* v = &qkv[(b * S + j) * cols + (nh + nkv) * d + kh * d];
          for (int e = 0; e < d; ++e) out[(b * S + i) * nh * d + h * d + e] += p[j] / z * v[e];
        }
      }
    }
  return out;
}

// ∂/∂x of Σ dy ⊙ f(x), by central differences in double.
tt::HostVec fd_vjp(const std::function<tt::HostVec(const tt::HostVec&)>& f, const tt::HostVec& x,
                   const tt::HostVec& dy, double step = 1e-6) {
  return tt::fd_gradient([&](const tt::HostVec& v) { return tt::dot(dy, f(v)); }, x, step);
}

}  // namespace

TEMPLATE_TEST_CASE("rmsnorm forward and backward against a double reference", "[kernels][llama]", float, kx::bf16) {
  using T = TestType;
  using A = kx::acc_t<T>;
  // Not a structured binding: lambdas below capture N and H (C++20 only; nvcc warns #3357-D).
  const auto shape = GENERATE(std::make_pair(5, 24), std::make_pair(1, 2), std::make_pair(70, 8));
  const int N = shape.first, H = shape.second;
  INFO("N=" << N << " H=" << H);
  const double eps = 1e-5;
  std::mt19937 rng(7);
  Exec exec;
  const auto hx = tt::random_vec<T>(rng, std::size_t(N) * H, -2.0, 2.0);
  const auto hr = tt::random_vec<T>(rng, std::size_t(N) * H, -1.0, 1.0);
  const auto hw = tt::random_vec<T>(rng, H, 0.5, 1.5);
  const auto hdy = tt::random_vec<T>(rng, std::size_t(N) * H);
  const auto hdw0 = tt::random_vec<float>(rng, H);
  auto x = tt::to_device<T>(hx, N, H);
  auto w = tt::to_device<T>(hw);
  auto dy = tt::to_device<T>(hdy, N, H);
  auto dw = tt::to_device<A>(hdw0);
  tk::Matrix<T> y("y", N, H), dx("dx", N, H);
  tk::Vector<A> rstd("rstd", N);
  tk::rmsnorm_forward(exec, x, w, y, rstd, A(eps));
  tk::rmsnorm_backward(exec, dy, x, w, rstd, dx, dw);
  exec.fence();

  tt::HostVec ref_rstd;
  const auto ref_y = rmsnorm_ref(hx, hw, N, H, eps, &ref_rstd);
  CHECK(tt::max_rel_err(tt::to_host(y), ref_y) < tolerance<T>());
  CHECK(tt::max_rel_err(tt::to_host(rstd), ref_rstd) < 2e-6);  // fp32 statistics whatever T is
  const auto ref_dx = fd_vjp([&](const tt::HostVec& v) { return rmsnorm_ref(v, hw, N, H, eps); }, hx, hdy);
  const auto ref_dw = fd_vjp([&](const tt::HostVec& v) { return rmsnorm_ref(hx, v, N, H, eps); }, hw, hdy);
  tt::HostVec want_dw = hdw0;
  for (int j = 0; j < H; ++j) want_dw[j] += ref_dw[j];
  CHECK(tt::max_rel_err(tt::to_host(dx), ref_dx) < tolerance<T>());
  CHECK(tt::max_rel_err(tt::to_host(dw), want_dw, tt::max_abs(hdw0)) < 2e-5);  // accumulated in fp32

  // The fused residual add: x1 = x + r stored, y bitwise rmsnorm_forward(x1).
  auto r = tt::to_device<T>(hr, N, H);
  tk::Matrix<T> x1("x1", N, H), y1("y1", N, H), y2("y2", N, H);
  tk::Vector<A> rstd1("rstd1", N), rstd2("rstd2", N);
  tk::add_rmsnorm_forward(exec, x, r, x1, w, y1, rstd1, A(eps));
  tk::rmsnorm_forward(exec, x1, w, y2, rstd2, A(eps));
  exec.fence();
  CHECK(tt::bitwise_equal(tt::to_host(y1), tt::to_host(y2)));
  CHECK(tt::bitwise_equal(tt::to_host(rstd1), tt::to_host(rstd2)));
  tt::HostVec sum(hx.size());
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = static_cast<double>(static_cast<T>(hx[i] + hr[i]));
  CHECK(tt::bitwise_equal(tt::to_host(x1), sum));
}

TEMPLATE_TEST_CASE("silu_mul forward and backward against a double reference", "[kernels][llama]", float, kx::bf16) {
  using T = TestType;
  const int N = 6, F = 10;
  std::mt19937 rng(11);
  Exec exec;
  auto hh = tt::random_vec<T>(rng, std::size_t(N) * 2 * F, -4.0, 4.0);
  hh[0] = static_cast<double>(static_cast<T>(-120.0));  // exp(−g) overflows in float: σ = 0, no NaN
  const auto hda = tt::random_vec<T>(rng, std::size_t(N) * F);
  auto h = tt::to_device<T>(hh, N, 2 * F);
  auto da = tt::to_device<T>(hda, N, F);
  tk::Matrix<T> a("a", N, F), dh("dh", N, 2 * F);
  tk::silu_mul_forward(exec, h, a);
  tk::silu_mul_backward(exec, da, h, dh);
  exec.fence();
  CHECK(tt::max_rel_err(tt::to_host(a), silu_mul_ref(hh, N, F)) < tolerance<T>());
  const auto ref_dh = fd_vjp([&](const tt::HostVec& v) { return silu_mul_ref(v, N, F); }, hh, hda);
  const auto got_dh = tt::to_host(dh);
  CHECK(tt::max_rel_err(got_dh, ref_dh) < tolerance<T>());
  for (double v : got_dh) REQUIRE(std::isfinite(v));
  CHECK(got_dh[0] == 0.0);
}

TEMPLATE_TEST_CASE("rope tables, forward and backward against a double reference (rotate-half)", "[kernels][llama]",
                   float, kx::bf16) {
  using T = TestType;
  const int S = 7, B = 2, d = 8, q_heads = 2, kv_heads = 1;
  const int cols = (q_heads + 2 * kv_heads) * d, N = B * S;
  // RoPE's frequencies θ^(−2i/d), or a scaled RoPE's (any positive ones) with an amplitude.
  const bool scaled = GENERATE(false, true);
  INFO("scaled " << scaled);
  std::vector<double> omega;
  for (int i = 0; i < d / 2; ++i) omega.push_back(scaled ? 0.9 / (1 + 3 * i) : std::pow(500000.0, -2.0 * i / d));
  const double amplitude = scaled ? 1.25 : 1.0;
  std::mt19937 rng(13);
  Exec exec;
  tk::Matrix<float> cos("cos", S, d / 2), sin("sin", S, d / 2);
  tk::rope_tables(exec, cos, sin, omega, amplitude);
  const auto hx = tt::random_vec<T>(rng, std::size_t(N) * cols);
  const auto hdy = tt::random_vec<T>(rng, std::size_t(N) * cols);
  auto x = tt::to_device<T>(hx, N, cols);
  auto dy = tt::to_device<T>(hdy, N, cols);
  tk::rope_forward(exec, x, cos, sin, q_heads + kv_heads);
  tk::rope_backward(exec, dy, cos, sin, q_heads + kv_heads);
  exec.fence();

  tt::HostVec ref_cos, ref_sin;
  for (int p = 0; p < S; ++p)
    for (int i = 0; i < d / 2; ++i) {
      ref_cos.push_back(amplitude * std::cos(p * omega[i]));
      ref_sin.push_back(amplitude * std::sin(p * omega[i]));
    }
  CHECK(tt::max_rel_err(tt::to_host(cos), ref_cos) < 1e-7);
  CHECK(tt::max_rel_err(tt::to_host(sin), ref_sin) < 1e-7);
  const auto rope = [&](const tt::HostVec& v) {
    return rope_ref(v, N, cols, q_heads + kv_heads, d, S, omega, amplitude);
  };
  const auto got = tt::to_host(x);
  CHECK(tt::max_rel_err(got, rope(hx)) < tolerance<T>());
  // V is not rotated: its columns are bitwise the input's, in the forward and the backward.
  const auto got_dy = tt::to_host(dy);
  for (int r = 0; r < N; ++r)
    for (int c = (q_heads + kv_heads) * d; c < cols; ++c) {
      REQUIRE(got[r * cols + c] == hx[r * cols + c]);
      REQUIRE(got_dy[r * cols + c] == hdy[r * cols + c]);
    }
  // Position 0 of each sequence is not rotated either (rows 0 and S), only scaled by the amplitude
  // (and then rounded to T).
  const double exact = scaled ? tolerance<T>() : 1e-6;
  for (int c = 0; c < (q_heads + kv_heads) * d; ++c)
    REQUIRE(std::fabs(got[S * cols + c] - amplitude * hx[S * cols + c]) <= exact * std::fabs(hx[S * cols + c]));
  CHECK(tt::max_rel_err(got_dy, fd_vjp(rope, hx, hdy)) < tolerance<T>());
}

// Multi-head latent attention rotates the last d_R = 8 of each query head's 4 + 8 features (its
// decoupled rotary part): the strided rotation against the reference, the other features bitwise
// as they were, forward and backward.
TEMPLATE_TEST_CASE("rope on a slice of each head (MLA's decoupled rotary part) against a double reference",
                   "[kernels][llama]", float, kx::bf16) {
  using T = TestType;
  const int S = 5, B = 2, d = 8, nope = 4, stride = nope + d, heads = 3, cols = heads * stride, N = B * S;
  std::vector<double> omega;
  for (int i = 0; i < d / 2; ++i) omega.push_back(std::pow(10000.0, -2.0 * i / d));
  std::mt19937 rng(29);
  Exec exec;
  tk::Matrix<float> cos("cos", S, d / 2), sin("sin", S, d / 2);
  tk::rope_tables(exec, cos, sin, omega);
  const auto hx = tt::random_vec<T>(rng, std::size_t(N) * cols);
  const auto hdy = tt::random_vec<T>(rng, std::size_t(N) * cols);
  auto x = tt::to_device<T>(hx, N, cols);
  auto dy = tt::to_device<T>(hdy, N, cols);
  tk::rope_forward(exec, x, cos, sin, tk::RotaryHeads(heads, stride, nope));
  tk::rope_backward(exec, dy, cos, sin, tk::RotaryHeads(heads, stride, nope));
  exec.fence();
  const auto rope = [&](const tt::HostVec& v) { return rope_ref(v, N, cols, heads, d, S, omega, 1.0, stride, nope); };
  const auto got = tt::to_host(x), got_dy = tt::to_host(dy);
  CHECK(tt::max_rel_err(got, rope(hx)) < tolerance<T>());
  CHECK(tt::max_rel_err(got_dy, fd_vjp(rope, hx, hdy)) < tolerance<T>());
  for (int r = 0; r < N; ++r)
    for (int h = 0; h < heads; ++h)
      for (int c = h * stride; c < h * stride + nope; ++c) {
        REQUIRE(got[r * cols + c] == hx[r * cols + c]);
        REQUIRE(got_dy[r * cols + c] == hdy[r * cols + c]);
      }
  // A slice that leaves its stride is refused.
  CHECK_THROWS(tk::rope_forward(exec, x, cos, sin, tk::RotaryHeads(heads, stride, nope + 1)));
}

TEMPLATE_TEST_CASE("grouped-query attention: repeat_kv around the attention kernels, against a double reference",
                   "[kernels][llama]", float, kx::bf16) {
  using T = TestType;
  using A = kx::acc_t<T>;
  const auto heads = GENERATE(std::make_pair(4, 2), std::make_pair(4, 1), std::make_pair(2, 2));
  const int nh = heads.first, nkv = heads.second;  // captured below: no structured binding (C++20)
  INFO("nh=" << nh << " nkv=" << nkv);
  const int B = 2, S = 5, d = 4, N = B * S;
  const int grouped_cols = (nh + 2 * nkv) * d, full_cols = 3 * nh * d;
  std::mt19937 rng(17);
  Exec exec;
  const auto hqkv = tt::random_vec<T>(rng, std::size_t(N) * grouped_cols, -1.5, 1.5);
  const auto hdo = tt::random_vec<T>(rng, std::size_t(N) * nh * d);
  auto qkv = tt::to_device<T>(hqkv, N, grouped_cols);
  auto dout = tt::to_device<T>(hdo, N, nh * d);
  tk::Matrix<T> full("full", N, full_cols), out("out", N, nh * d), d_full("d_full", N, full_cols),
      d_qkv("d_qkv", N, grouped_cols);
  tk::Vector<A> lse("lse", std::size_t(B) * nh * S);
  tk::repeat_kv_forward(exec, qkv, full, nh, nkv, d);
  tk::attention_forward(exec, full, out, lse, B, S, nh, d);
  tk::attention_backward(exec, dout, full, lse, d_full, B, S, nh);
  tk::repeat_kv_backward(exec, d_full, d_qkv, nh, nkv, d);
  exec.fence();

  // The copy itself is exact: query head h's K and V are key/value head h / (nh/nkv)'s.
  const auto got_full = tt::to_host(full);
  for (int r = 0; r < N; ++r)
    for (int h = 0; h < nh; ++h)
      for (int e = 0; e < d; ++e) {
        const int kh = h / (nh / nkv);
        REQUIRE(got_full[r * full_cols + h * d + e] == hqkv[r * grouped_cols + h * d + e]);
        REQUIRE(got_full[r * full_cols + nh * d + h * d + e] == hqkv[r * grouped_cols + nh * d + kh * d + e]);
        REQUIRE(got_full[r * full_cols + 2 * nh * d + h * d + e] ==
                hqkv[r * grouped_cols + (nh + nkv) * d + kh * d + e]);
      }
  const auto attention = [&](const tt::HostVec& v) { return gqa_attention_ref(v, B, S, nh, nkv, d); };
  // bf16 end to end (two GEMMs and a softmax in 16 bits, as the attention kernels' own bf16 test).
  const double tol = std::is_same<T, kx::bf16>::value ? 1.0 / 32 : 2e-5;
  CHECK(tt::max_rel_err(tt::to_host(out), attention(hqkv)) < tol);
  CHECK(tt::max_rel_err(tt::to_host(d_qkv), fd_vjp(attention, hqkv, hdo)) < tol);
}

TEST_CASE("repeat_kv refuses a grouping that does not divide", "[kernels][llama]") {
  Exec exec;
  tk::Matrix<float> grouped("g", 2, (3 + 2 * 2) * 4), full("f", 2, 3 * 3 * 4);
  CHECK_THROWS_WITH(tk::repeat_kv_forward(exec, grouped, full, 3, 2, 4),
                    Catch::Matchers::Contains("q_heads must be a positive multiple of kv_heads"));
}
