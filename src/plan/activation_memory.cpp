#include "src/plan/activation_memory.hpp"

#include <algorithm>

#include "src/plan/count.hpp"

namespace tptrain::plan {

namespace {

// The sizes of the formulas, 64-bit, every product checked (src/plan/count.hpp).
struct Sizes {
  Count b, s, h, f, a, t, vocab, e;
  Count N, n;
};
Sizes sizes(const Config& c) {
  const model::GptShape& m = c.shape;
  Sizes z{c.micro_batch, m.seq_length, m.hidden, m.ffn_hidden, m.heads, m.tensor, m.padded_vocab(),
          c.element_bytes(), 0, 0};
  z.N = z.b * z.s;
  z.n = c.sequence_parallel ? z.N / z.t : z.N;
  return z;
}
constexpr std::int64_t kStatistic = 4;  // fp32

}  // namespace

std::int64_t total_bytes(const std::vector<Buffer>& buffers) {
  Count n = 0;
  for (const Buffer& b : buffers) n += b.bytes;
  return n;
}

std::int64_t block_input(const Config& c) { const Sizes z = sizes(c); return z.n * z.h * z.e; }
std::int64_t ln_1_output(const Config& c) { const Sizes z = sizes(c); return z.n * z.h * z.e; }
std::int64_t ln_1_statistics(const Config& c) { const Sizes z = sizes(c); return 2 * z.n * kStatistic; }
std::int64_t qkv_output(const Config& c) { const Sizes z = sizes(c); return z.N * (3 * z.h / z.t) * z.e; }
std::int64_t attention_lse(const Config& c) { const Sizes z = sizes(c); return z.N * (z.a / z.t) * kStatistic; }
std::int64_t attention_probabilities(const Config& c) {
  const Sizes z = sizes(c);
  return z.b * (z.a / z.t) * z.s * z.s * z.e;
}
std::int64_t attention_context(const Config& c) { const Sizes z = sizes(c); return z.N * (z.h / z.t) * z.e; }
std::int64_t attention_residual(const Config& c) { const Sizes z = sizes(c); return z.n * z.h * z.e; }
std::int64_t ln_2_output(const Config& c) { const Sizes z = sizes(c); return z.n * z.h * z.e; }
std::int64_t ln_2_statistics(const Config& c) { const Sizes z = sizes(c); return 2 * z.n * kStatistic; }
std::int64_t fc_output(const Config& c) { const Sizes z = sizes(c); return z.N * (z.f / z.t) * z.e; }
std::int64_t gelu_sigmoid(const Config& c) { const Sizes z = sizes(c); return z.N * (z.f / z.t) * z.e; }

namespace {

std::vector<Buffer> selective_set(const Config& c) {
  return {{"x", block_input(c)},
          {"ln_1.out", ln_1_output(c)},
          {"ln_1.mean_rstd", ln_1_statistics(c)},
          {"attn.qkv", qkv_output(c)},
          {"attn.lse", attention_lse(c)},
          {"attn.context", attention_context(c)},
          {"x1", attention_residual(c)},
          {"ln_2.out", ln_2_output(c)},
          {"ln_2.mean_rstd", ln_2_statistics(c)},
          {"mlp.fc", fc_output(c)},
          {"mlp.gelu_sigmoid", gelu_sigmoid(c)}};
}

}  // namespace

std::vector<Buffer> layer_activations(const Config& c) {
  switch (c.recompute) {
    case Recompute::full:
      return {{"x", block_input(c)}};
    case Recompute::selective:
      return selective_set(c);
    case Recompute::none:
      break;
  }
  std::vector<Buffer> all = selective_set(c);
  all.insert(all.begin() + 5, Buffer{"attn.probabilities", attention_probabilities(c)});
  return all;
}

std::vector<Buffer> recompute_working_set(const Config& c) {
  if (c.recompute != Recompute::full) return {};
  std::vector<Buffer> set = selective_set(c);
  set.erase(set.begin());  // the block input stays per layer and micro-batch (layer_activations)
  return set;
}

int micro_batches_in_flight(int stage, int stages, int micro_batches) {
  return std::min(stages - stage, micro_batches);
}

std::int64_t stage_output(const Config& c) { const Sizes z = sizes(c); return z.n * z.h * z.e; }

std::int64_t stage_activation_bytes(const Config& c, int layers, int in_flight) {
  return Count(in_flight) * (Count(layers) * total_bytes(layer_activations(c)) + stage_output(c)) +
         total_bytes(recompute_working_set(c));
}

std::int64_t final_norm_output(const Config& c) { const Sizes z = sizes(c); return z.n * z.h * z.e; }
std::int64_t final_norm_statistics(const Config& c) { const Sizes z = sizes(c); return 2 * z.n * kStatistic; }
std::int64_t logits_and_gradient(const Config& c) {
  const Sizes z = sizes(c);
  return 2 * z.N * (z.vocab / z.t) * z.e;
}
std::int64_t loss_vectors(const Config& c) { const Sizes z = sizes(c); return 4 * z.N * kStatistic; }

std::vector<Buffer> head_buffers(const Config& c) {
  return {{"ln_f.out", final_norm_output(c)},
          {"ln_f.mean_rstd", final_norm_statistics(c)},
          {"logits and their gradient", logits_and_gradient(c)},
          {"loss vectors", loss_vectors(c)}};
}

std::int64_t attention_scores_scratch(const Config& c) { return attention_probabilities(c); }
std::int64_t attention_row_tile(const Config& c) {
  const Sizes z = sizes(c);
  return z.b * (z.a / z.t) * std::min<std::int64_t>(z.s, 128) * z.s * z.e;
}
std::int64_t gradient_buffers(const Config& c) {
  const Sizes z = sizes(c);
  const Count dk_sum = z.e < 4 ? z.N * (z.h / z.t) * kStatistic : Count(0);  // fp32 dK sum of 16-bit runs
  return (z.N * (z.h / z.t) + z.N * (3 * z.h / z.t) + 2 * z.N * (z.f / z.t) + 5 * z.n * z.h) * z.e + dk_sum;
}
std::int64_t sequence_parallel_buffers(const Config& c) {
  const Sizes z = sizes(c);
  return c.sequence_parallel && z.t > 1 ? 2 * z.N * z.h * z.e : Count(0);  // off with one tensor rank
}

std::vector<Buffer> workspace_buffers(const Config& c) {
  return {{"attention scores", attention_scores_scratch(c)},
          {"attention row tile", attention_row_tile(c)},
          {"gradient buffers", gradient_buffers(c)},
          {"sequence-parallel gather and reduce-scatter buffers", sequence_parallel_buffers(c)}};
}

}  // namespace tptrain::plan
