// Naive host references for the kernels in kokkos_kernels/: plain loops in double over
// row-major std::vector data. Readable first; speed is irrelevant.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "test_util.hpp"

namespace tptrain::kernels::ref {

using test::HostVec;

// y[N,out] = x[N,in] · W[out,in]ᵀ
inline HostVec linear_forward(const HostVec& x, const HostVec& W, int N, int in, int out) {
  HostVec y(static_cast<std::size_t>(N) * out, 0.0);
  for (int t = 0; t < N; ++t)
    for (int o = 0; o < out; ++o) {
      double s = 0;
      for (int k = 0; k < in; ++k) s += x[t * in + k] * W[o * in + k];
      y[t * out + o] = s;
    }
  return y;
}

// dx[N,in] = dy[N,out] · W[out,in]
inline HostVec linear_backward_input(const HostVec& dy, const HostVec& W, int N, int in, int out) {
  HostVec dx(static_cast<std::size_t>(N) * in, 0.0);
  for (int t = 0; t < N; ++t)
    for (int k = 0; k < in; ++k) {
      double s = 0;
      for (int o = 0; o < out; ++o) s += dy[t * out + o] * W[o * in + k];
      dx[t * in + k] = s;
    }
  return dx;
}

// dW[out,in] += dy[N,out]ᵀ · x[N,in]
inline void linear_backward_weight(const HostVec& dy, const HostVec& x, int N, int in, int out,
                                   HostVec& dW) {
  for (int o = 0; o < out; ++o)
    for (int k = 0; k < in; ++k) {
      double s = 0;
      for (int t = 0; t < N; ++t) s += dy[t * out + o] * x[t * in + k];
      dW[o * in + k] += s;
    }
}

struct LayerNormOut {
  HostVec y, mean, rstd;
};

inline LayerNormOut layernorm_forward(const HostVec& x, const HostVec& gamma, const HostVec& beta,
                                      int N, int H, double eps) {
  LayerNormOut r{HostVec(x.size()), HostVec(N), HostVec(N)};
  for (int t = 0; t < N; ++t) {
    double mu = 0;
    for (int j = 0; j < H; ++j) mu += x[t * H + j];
    mu /= H;
    double var = 0;
    for (int j = 0; j < H; ++j) var += (x[t * H + j] - mu) * (x[t * H + j] - mu);
    var /= H;
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int j = 0; j < H; ++j) r.y[t * H + j] = (x[t * H + j] - mu) * rs * gamma[j] + beta[j];
    r.mean[t] = mu;
    r.rstd[t] = rs;
  }
  return r;
}

struct LayerNormGrads {
  HostVec dx, dgamma, dbeta;
};

// Textbook backward, written out with explicit sums (independent of the kernel's formula
// layout): dx_j = rstd (g_j - (1/H) Σ_k g_k - x̂_j (1/H) Σ_k g_k x̂_k), g = dy·γ.
inline LayerNormGrads layernorm_backward(const HostVec& dy, const HostVec& x, const HostVec& gamma,
                                         int N, int H, double eps) {
  const LayerNormOut f = layernorm_forward(x, gamma, HostVec(H, 0.0), N, H, eps);
  LayerNormGrads g{HostVec(x.size()), HostVec(H, 0.0), HostVec(H, 0.0)};
  for (int t = 0; t < N; ++t) {
    double sg = 0, sgx = 0;
    for (int j = 0; j < H; ++j) {
      const double xhat = (x[t * H + j] - f.mean[t]) * f.rstd[t];
      sg += dy[t * H + j] * gamma[j];
      sgx += dy[t * H + j] * gamma[j] * xhat;
    }
    for (int j = 0; j < H; ++j) {
      const double xhat = (x[t * H + j] - f.mean[t]) * f.rstd[t];
      g.dx[t * H + j] = f.rstd[t] * (dy[t * H + j] * gamma[j] - sg / H - xhat * sgx / H);
      g.dgamma[j] += dy[t * H + j] * xhat;
      g.dbeta[j] += dy[t * H + j];
    }
  }
  return g;
}

// The tanh form as written in GPT-2, in long double: 1 + tanh(u) cancels for negative x, and
// long double keeps that below double precision over the tested range.
inline double gelu(double xd) {
  const long double x = xd;
  const long double k = std::sqrt(2.0L / std::acos(-1.0L));
  return static_cast<double>(0.5L * x * (1.0L + std::tanh(k * (x + 0.044715L * x * x * x))));
}

inline double gelu_grad(double xd) {
  const long double x = xd;
  const long double k = std::sqrt(2.0L / std::acos(-1.0L));
  const long double u = k * (x + 0.044715L * x * x * x);
  const long double du = k * (1.0L + 3.0L * 0.044715L * x * x);
  const long double th = std::tanh(u);
  return static_cast<double>(0.5L * (1.0L + th) + 0.5L * x * (1.0L - th * th) * du);
}

struct AttentionOut {
  HostVec out;  // [B*S, nh*d]
  HostVec att;  // [B, nh, S, S]
};

// Naive causal attention, per (b, h): full S×S scores with -inf style masking done by skipping.
inline AttentionOut attention_forward(const HostVec& qkv, int B, int S, int nh, int d) {
  const int Hl = nh * d;
  AttentionOut r{HostVec(static_cast<std::size_t>(B) * S * Hl, 0.0),
                 HostVec(static_cast<std::size_t>(B) * nh * S * S, 0.0)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto Q = [&](int b, int h, int i, int k) { return qkv[(b * S + i) * 3 * Hl + h * d + k]; };
  auto K = [&](int b, int h, int i, int k) { return qkv[(b * S + i) * 3 * Hl + Hl + h * d + k]; };
  auto V = [&](int b, int h, int i, int k) {
    return qkv[(b * S + i) * 3 * Hl + 2 * Hl + h * d + k];
  };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < nh; ++h)
      for (int i = 0; i < S; ++i) {
        std::vector<double> s(i + 1);
        double m = -1e300;
        for (int j = 0; j <= i; ++j) {
          double dotp = 0;
          for (int k = 0; k < d; ++k) dotp += Q(b, h, i, k) * K(b, h, j, k);
          s[j] = dotp * scale;
          m = std::max(m, s[j]);
        }
        double z = 0;
        for (int j = 0; j <= i; ++j) z += std::exp(s[j] - m);
        for (int j = 0; j <= i; ++j) r.att[((b * nh + h) * S + i) * S + j] = std::exp(s[j] - m) / z;
        for (int k = 0; k < d; ++k) {
          double o = 0;
          for (int j = 0; j <= i; ++j) o += r.att[((b * nh + h) * S + i) * S + j] * V(b, h, j, k);
          r.out[(b * S + i) * Hl + h * d + k] = o;
        }
      }
  return r;
}

// Naive backward through the full softmax Jacobian: dS_ij = Σ_l dP_il P_il (δ_jl - P_ij).
inline HostVec attention_backward(const HostVec& dout, const HostVec& qkv, const HostVec& att,
                                  int B, int S, int nh, int d) {
  const int Hl = nh * d;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  HostVec dqkv(qkv.size(), 0.0);
  auto at = [&](const HostVec& v, int b, int i, int col) -> double {
    return v[(b * S + i) * 3 * Hl + col];
  };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < nh; ++h) {
      const int qc = h * d, kc = Hl + h * d, vc = 2 * Hl + h * d;
      auto P = [&](int i, int j) { return att[((b * nh + h) * S + i) * S + j]; };
      // dP = dO Vᵀ (masked)
      std::vector<double> dP(S * S, 0.0), dS(S * S, 0.0);
      for (int i = 0; i < S; ++i)
        for (int j = 0; j <= i; ++j) {
          double s = 0;
          for (int k = 0; k < d; ++k)
            s += dout[(b * S + i) * Hl + h * d + k] * at(qkv, b, j, vc + k);
          dP[i * S + j] = s;
        }
      // softmax Jacobian, row by row
      for (int i = 0; i < S; ++i)
        for (int j = 0; j <= i; ++j) {
          double s = 0;
          for (int l = 0; l <= i; ++l)
            s += dP[i * S + l] * P(i, l) * ((j == l ? 1.0 : 0.0) - P(i, j));
          dS[i * S + j] = s;
        }
      for (int i = 0; i < S; ++i)
        for (int k = 0; k < d; ++k) {
          double dq = 0, dk = 0, dv = 0;
          for (int j = 0; j < S; ++j) {
            dq += dS[i * S + j] * at(qkv, b, j, kc + k);  // dS is 0 above the diagonal
            dk += dS[j * S + i] * at(qkv, b, j, qc + k);
            dv += P(j, i) * dout[(b * S + j) * Hl + h * d + k];
          }
          dqkv[(b * S + i) * 3 * Hl + qc + k] = scale * dq;
          dqkv[(b * S + i) * 3 * Hl + kc + k] = scale * dk;
          dqkv[(b * S + i) * 3 * Hl + vc + k] = dv;
        }
    }
  return dqkv;
}

struct CrossEntropyOut {
  HostVec loss;     // [N]
  HostVec dlogits;  // [N, V], gradient of scale · Σ_t loss_t
};

// Full-vocabulary reference through log-softmax.
inline CrossEntropyOut cross_entropy(const HostVec& logits, const std::vector<int>& targets, int N,
                                     int V, double scale) {
  CrossEntropyOut r{HostVec(N), HostVec(static_cast<std::size_t>(N) * V)};
  for (int t = 0; t < N; ++t) {
    double m = logits[t * V];
    for (int v = 1; v < V; ++v) m = std::max(m, logits[t * V + v]);
    double z = 0;
    for (int v = 0; v < V; ++v) z += std::exp(logits[t * V + v] - m);
    const double lse = m + std::log(z);
    r.loss[t] = -(logits[t * V + targets[t]] - lse);  // -log_softmax[target]
    for (int v = 0; v < V; ++v)
      r.dlogits[t * V + v] =
          scale * (std::exp(logits[t * V + v] - lse) - (v == targets[t] ? 1.0 : 0.0));
  }
  return r;
}

}  // namespace tptrain::kernels::ref
