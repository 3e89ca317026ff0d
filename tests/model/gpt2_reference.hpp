// A straightforward, unsharded GPT-2 forward pass (docs/design.md, "Model semantics"): plain
// loops over std::vector<double>, no Kokkos, no BLAS, no tensor parallelism. It is the
// "straightforward GPT-2 computation" the model's loss (and `tptrain eval`) is checked against.
//
//   x = wte[token] + wpe[position]
//   per layer (pre-LN):  a = LN_1(x);  qkv = a Wqkvᵀ + b  (rows: all Q, all K, all V; head h
//                        owns rows h·d .. h·d+d-1 inside each);  causal softmax attention per head
//                        with scale 1/sqrt(d);  x += ctx Wprojᵀ + b;
//                        c = LN_2(x);  x += GELU_tanh(c Wfcᵀ + b) Wprojᵀ + b
//   x = LN_f(x);  logits = x · wteᵀ over the real vocabulary;  loss = mean next-token CE.
// LayerNorm: biased variance, eps 1e-5 inside the square root (PyTorch).
//
// Weights are full logical tensors keyed by their checkpoint names ("embedding/word" [V, H],
// "embedding/position" [S, H], "layers/<i>/attn/qkv/weight" [3H, H], ..., "ln_f/bias" [H]),
// row-major, exactly vocab_size rows for the word embedding.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/model/spec/gpt_shape.hpp"

namespace tptrain::test {

using NamedTensors = std::map<std::string, std::vector<double>>;

struct Gpt2ReferenceResult {
  std::vector<double> logits;      // [N, V] (real vocabulary only), N = batch * S
  std::vector<double> token_loss;  // [N] -log softmax(logits)[target]
  double mean_loss = 0.0;
};

namespace gpt2_reference_detail {

using Vec = std::vector<double>;

inline const Vec& tensor(const NamedTensors& w, const std::string& name, std::size_t size) {
  const auto it = w.find(name);
  if (it == w.end()) throw std::invalid_argument("gpt2_reference: missing tensor '" + name + "'");
  if (it->second.size() != size)
    throw std::invalid_argument("gpt2_reference: tensor '" + name + "' has " +
                                std::to_string(it->second.size()) + " elements, expected " +
                                std::to_string(size));
  return it->second;
}

// y[t, :] = (x[t, :] - mean) / sqrt(var + 1e-5) · gamma + beta, biased variance.
inline Vec layer_norm(const Vec& x, std::size_t N, std::size_t H, const Vec& gamma, const Vec& beta) {
  Vec y(N * H);
  for (std::size_t t = 0; t < N; ++t) {
    const double* row = &x[t * H];
    double mean = 0.0;
    for (std::size_t j = 0; j < H; ++j) mean += row[j];
    mean /= static_cast<double>(H);
    double var = 0.0;
    for (std::size_t j = 0; j < H; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= static_cast<double>(H);
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (std::size_t j = 0; j < H; ++j) y[t * H + j] = (row[j] - mean) * rstd * gamma[j] + beta[j];
  }
  return y;
}

// y[N, out] = x[N, in] · Wᵀ + b, W [out, in] (PyTorch convention).
inline Vec linear(const Vec& x, std::size_t N, std::size_t in, const Vec& W, const Vec& b,
                  std::size_t out) {
  Vec y(N * out);
  for (std::size_t t = 0; t < N; ++t)
    for (std::size_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (std::size_t i = 0; i < in; ++i) acc += x[t * in + i] * W[o * in + i];
      y[t * out + o] = acc;
    }
  return y;
}

inline double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / std::acos(-1.0));
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

}  // namespace gpt2_reference_detail

// The forward pass of a [batch, S] block of tokens (row t = b·S + s); targets are the next
// tokens. Token ids must be < vocab_size.
inline Gpt2ReferenceResult gpt2_reference(const model::GptShape& s, const NamedTensors& w,
                                          const std::vector<int>& tokens,
                                          const std::vector<int>& targets, int batch) {
  using namespace gpt2_reference_detail;
  const std::size_t S = static_cast<std::size_t>(s.seq_length);
  const std::size_t H = static_cast<std::size_t>(s.hidden);
  const std::size_t F = static_cast<std::size_t>(s.ffn_hidden);
  const std::size_t V = static_cast<std::size_t>(s.vocab_size);
  const std::size_t nh = static_cast<std::size_t>(s.heads);
  const std::size_t d = H / nh;
  const std::size_t N = static_cast<std::size_t>(batch) * S;
  if (H % nh != 0) throw std::invalid_argument("gpt2_reference: hidden not divisible by heads");
  if (tokens.size() != N || targets.size() != N)
    throw std::invalid_argument("gpt2_reference: tokens/targets must hold batch * seq_length ids");
  for (std::size_t t = 0; t < N; ++t)
    if (tokens[t] < 0 || static_cast<std::size_t>(tokens[t]) >= V || targets[t] < 0 ||
        static_cast<std::size_t>(targets[t]) >= V)
      throw std::invalid_argument("gpt2_reference: token id out of the vocabulary");

  // Embedding.
  const Vec& wte = tensor(w, "embedding/word", V * H);
  const Vec& wpe = tensor(w, "embedding/position", S * H);
  Vec x(N * H);
  for (std::size_t t = 0; t < N; ++t)
    for (std::size_t j = 0; j < H; ++j)
      x[t * H + j] = wte[static_cast<std::size_t>(tokens[t]) * H + j] + wpe[(t % S) * H + j];

  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "layers/" + std::to_string(l) + "/";
    // Attention.
    const Vec a = layer_norm(x, N, H, tensor(w, p + "ln_1/weight", H), tensor(w, p + "ln_1/bias", H));
    const Vec qkv = linear(a, N, H, tensor(w, p + "attn/qkv/weight", 3 * H * H),
                           tensor(w, p + "attn/qkv/bias", 3 * H), 3 * H);
    Vec ctx(N * H, 0.0);
    Vec score(S);
    for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b)
      for (std::size_t h = 0; h < nh; ++h)
        for (std::size_t i = 0; i < S; ++i) {
          const double* q = &qkv[(b * S + i) * 3 * H + 0 * H + h * d];
          double smax = -INFINITY;
          for (std::size_t j = 0; j <= i; ++j) {  // causal: keys j <= i only
            const double* k = &qkv[(b * S + j) * 3 * H + 1 * H + h * d];
            double dot = 0.0;
            for (std::size_t e = 0; e < d; ++e) dot += q[e] * k[e];
            score[j] = dot * scale;
            smax = std::max(smax, score[j]);
          }
          double denom = 0.0;
          for (std::size_t j = 0; j <= i; ++j) {
            score[j] = std::exp(score[j] - smax);
            denom += score[j];
          }
          for (std::size_t j = 0; j <= i; ++j) {
            const double* v = &qkv[(b * S + j) * 3 * H + 2 * H + h * d];
            for (std::size_t e = 0; e < d; ++e) ctx[(b * S + i) * H + h * d + e] += score[j] / denom * v[e];
          }
        }
    const Vec attn = linear(ctx, N, H, tensor(w, p + "attn/proj/weight", H * H),
                            tensor(w, p + "attn/proj/bias", H), H);
    for (std::size_t i = 0; i < N * H; ++i) x[i] += attn[i];
    // MLP.
    const Vec c = layer_norm(x, N, H, tensor(w, p + "ln_2/weight", H), tensor(w, p + "ln_2/bias", H));
    Vec hidden = linear(c, N, H, tensor(w, p + "mlp/fc/weight", F * H), tensor(w, p + "mlp/fc/bias", F), F);
    for (double& v : hidden) v = gelu_tanh(v);
    const Vec mlp = linear(hidden, N, F, tensor(w, p + "mlp/proj/weight", H * F),
                           tensor(w, p + "mlp/proj/bias", H), H);
    for (std::size_t i = 0; i < N * H; ++i) x[i] += mlp[i];
  }
  const Vec xf = layer_norm(x, N, H, tensor(w, "ln_f/weight", H), tensor(w, "ln_f/bias", H));

  // Tied output over the real vocabulary and the next-token cross-entropy.
  Gpt2ReferenceResult r;
  r.logits.assign(N * V, 0.0);
  r.token_loss.assign(N, 0.0);
  for (std::size_t t = 0; t < N; ++t) {
    double zmax = -INFINITY;
    for (std::size_t v = 0; v < V; ++v) {
      double z = 0.0;
      for (std::size_t j = 0; j < H; ++j) z += xf[t * H + j] * wte[v * H + j];
      r.logits[t * V + v] = z;
      zmax = std::max(zmax, z);
    }
    double sum = 0.0;
    for (std::size_t v = 0; v < V; ++v) sum += std::exp(r.logits[t * V + v] - zmax);
    r.token_loss[t] = std::log(sum) + zmax - r.logits[t * V + static_cast<std::size_t>(targets[t])];
    r.mean_loss += r.token_loss[t];
  }
  r.mean_loss /= static_cast<double>(N);
  return r;
}

}  // namespace tptrain::test
