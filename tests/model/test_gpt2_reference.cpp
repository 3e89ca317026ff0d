// The model against a straightforward, unsharded GPT-2 forward pass (gpt2_reference.hpp): the
// same logical weights must give the same mean next-token loss and the same logits, in fp32
// and fp64, for every tensor-parallel layout the world allows, with a padded vocabulary (11)
// and with the byte-level vocabulary (256).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "tests/model/gpt2_reference.hpp"
#include "tests/model/model_test_util.hpp"

using namespace tptrain;

namespace {

model::GptShape byte_shape(int tp) {
  model::GptShape s;
  s.layers = 2;
  s.hidden = 32;
  s.heads = 4;
  s.ffn_hidden = 128;
  s.seq_length = 16;
  s.vocab_size = 256;
  s.tensor = tp;
  return s;
}

// Every parameter as its full logical tensor, by checkpoint name (collective over the group).
template <class T>
test::NamedTensors logical_weights(model::GptModel<T>& m, parallel::Communicator& tp) {
  test::NamedTensors w;
  for (auto* p : m.parameters()) w[p->name] = test::logical(*p, false, tp);
  return w;
}

std::vector<int> host_tokens(const kernels::Tokens& t) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), t);
  return std::vector<int>(h.data(), h.data() + h.extent(0));
}

// stddev 0: the model's own GPT-2 initialisation; otherwise every parameter redrawn from
// N(0, stddev²) (a far-from-uniform output distribution, sensitive to any mistake).
template <class T>
void check_against_reference(model::GptShape shape, int tp_size, float stddev, double tolerance) {
  shape.tensor = tp_size;
  auto tp = test::tp_group(tp_size);
  const kx::ExecSpace exec;
  const int B = 2;
  model::GptModel<T> m(shape, B, *tp, 1234);
  if (stddev > 0) test::randomise(m, stddev, 99);
  const auto batch = test::random_batch(B, shape.seq_length, shape.vocab_size, 17);
  const double N = double(B) * shape.seq_length;
  const double loss = m.forward(exec, batch.first, batch.second) / N;

  const auto ref = test::gpt2_reference(shape, logical_weights(m, *tp), host_tokens(batch.first),
                                        host_tokens(batch.second), B);
  INFO("model loss " << loss << ", reference " << ref.mean_loss << ", relative difference "
                      << std::fabs(loss - ref.mean_loss) / std::fabs(ref.mean_loss));
  CHECK(std::isfinite(loss));
  CHECK(std::fabs(loss - ref.mean_loss) <= tolerance * std::fabs(ref.mean_loss));

  // The local logits (left by forward): this rank's real vocabulary columns.
  auto logits = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m.local_logits());
  const std::size_t V = static_cast<std::size_t>(shape.vocab_size);
  const int start = shape.vocab_start(tp->rank()), valid = shape.valid_vocab(tp->rank());
  double scale = 0.0, diff = 0.0;
  for (double z : ref.logits) scale = std::max(scale, std::fabs(z));
  for (std::size_t t = 0; t < logits.extent(0); ++t)
    for (int j = 0; j < valid; ++j)
      diff = std::max(diff, std::fabs(static_cast<double>(logits(t, static_cast<std::size_t>(j))) -
                                      ref.logits[t * V + static_cast<std::size_t>(start + j)]));
  INFO("max |logit difference| " << diff << ", max |logit| " << scale);
  CHECK(diff <= tolerance * scale);
}

template <class T>
void check_all_layouts(double tolerance) {
  for (int tp : {1, 2, 4}) {
    if (test::world_size() % tp != 0) continue;
    for (float stddev : {0.0f, 0.5f}) {
      INFO("tensor = " << tp << ", init stddev " << stddev << " (0: GPT-2 init)");
      {
        INFO("tiny shape (vocab 11, padded)");
        check_against_reference<T>(test::tiny_shape(tp), tp, stddev, tolerance);
      }
      {
        INFO("vocab 256, seq 16");
        check_against_reference<T>(byte_shape(tp), tp, stddev, tolerance);
      }
    }
  }
}

}  // namespace

TEST_CASE("GPT-2 reference: hand-checkable properties", "[model][reference]") {
  using test::gpt2_reference;
  const model::GptShape s = test::tiny_shape(1);
  const int B = 2, N = B * s.seq_length;
  // All-zero weights (LayerNorm gain too): every logit is 0, the loss is log V exactly.
  test::NamedTensors zero;
  const std::size_t H = std::size_t(s.hidden), F = std::size_t(s.ffn_hidden);
  zero["embedding/word"].assign(std::size_t(s.vocab_size) * H, 0.0);
  zero["embedding/position"].assign(std::size_t(s.seq_length) * H, 0.0);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "layers/" + std::to_string(l) + "/";
    for (const char* n : {"ln_1/weight", "ln_1/bias", "attn/proj/bias", "ln_2/weight", "ln_2/bias",
                          "mlp/proj/bias"})
      zero[p + n].assign(H, 0.0);
    zero[p + "attn/qkv/weight"].assign(3 * H * H, 0.0);
    zero[p + "attn/qkv/bias"].assign(3 * H, 0.0);
    zero[p + "attn/proj/weight"].assign(H * H, 0.0);
    zero[p + "mlp/fc/weight"].assign(F * H, 0.0);
    zero[p + "mlp/fc/bias"].assign(F, 0.0);
    zero[p + "mlp/proj/weight"].assign(H * F, 0.0);
  }
  zero["ln_f/weight"].assign(H, 0.0);
  zero["ln_f/bias"].assign(H, 0.0);
  std::vector<int> tokens(N), targets(N);
  for (int t = 0; t < N; ++t) {
    tokens[std::size_t(t)] = (3 * t) % s.vocab_size;
    targets[std::size_t(t)] = (5 * t + 1) % s.vocab_size;
  }
  CHECK(gpt2_reference(s, zero, tokens, targets, B).mean_loss ==
        Approx(std::log(double(s.vocab_size))).epsilon(1e-14));

  // Random weights: causal (changing the last token of sequence 0 changes only its logits).
  test::NamedTensors w = zero;
  std::mt19937 gen(5);
  std::normal_distribution<double> normal(0.0, 0.5);
  for (auto& named : w)
    for (double& v : named.second) v = normal(gen);
  const auto before = gpt2_reference(s, w, tokens, targets, B);
  const int last = s.seq_length - 1;
  tokens[std::size_t(last)] = (tokens[std::size_t(last)] + 1) % s.vocab_size;
  const auto after = gpt2_reference(s, w, tokens, targets, B);
  const std::size_t V = std::size_t(s.vocab_size);
  for (int t = 0; t < N; ++t) {
    double change = 0.0;
    for (std::size_t v = 0; v < V; ++v)
      change = std::max(change, std::fabs(after.logits[std::size_t(t) * V + v] -
                                          before.logits[std::size_t(t) * V + v]));
    INFO("token " << t << ": max logit change " << change);
    if (t == last) CHECK(change > 1e-3);
    else CHECK(change == 0.0);
  }
  // GELU, tanh approximation: 0.5 · (1 + tanh(sqrt(2/π) · 1.044715)) at x = 1.
  CHECK(test::gpt2_reference_detail::gelu_tanh(1.0) == Approx(0.8411919906082768).epsilon(1e-15));
  CHECK(test::gpt2_reference_detail::gelu_tanh(0.0) == 0.0);
  // A missing or mis-sized tensor is reported by name.
  w.erase("ln_f/bias");
  CHECK_THROWS_WITH(gpt2_reference(s, w, tokens, targets, B), Catch::Contains("ln_f/bias"));
}

TEST_CASE("GPT model loss matches the GPT-2 reference (fp32)", "[model][reference][mpi]") {
  check_all_layouts<float>(1e-5);
}

TEST_CASE("GPT model loss matches the GPT-2 reference (fp64)", "[model][reference][mpi]") {
  check_all_layouts<double>(1e-10);
}
