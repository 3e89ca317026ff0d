#include "src/plan/activation_memory.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "src/model/spec/block_descriptor.hpp"
#include "src/model/spec/model_parameters.hpp"
#include "src/plan/count.hpp"

namespace tptrain::plan {

namespace {

// The block descriptor's sizes for one micro-batch on one rank: s the rank's tokens of a sequence
// (seq_length / C with context parallelism), the whole sequence S for the rotary tables.
model::BlockSizes sizes(const Config& c) {
  model::BlockSizes z = model::block_sizes(c.shape, c.micro_batch);
  z.sequence_parallel = c.sequence_parallel;
  return z;
}
constexpr std::int64_t kStatistic = 4;  // fp32

// model::buffer_bytes with every product checked (src/plan/count.hpp). Each extent fits in 64
// bits (N = b·s of two 32-bit deck values) except N·a/t, which is multiplied here.
Count checked_buffer_bytes(const model::BufferRow& r, const model::BlockSizes& z, int element_bytes) {
  if (r.only_16_bit && element_bytes >= 4) return 0;
  Count n = r.element == model::Element::fp32 ? std::max(4, element_bytes) : element_bytes;
  for (const model::BufferDim d : r.shape)
    n *= d == model::BufferDim::token_heads_t ? Count(z.tokens()) * (z.a / z.t) : Count(model::extent(d, z));
  return n;
}

// The block descriptor's buffers that `keep` selects, with their bytes under c.
template <class Keep>
std::vector<Buffer> block_buffers(const Config& c, Keep keep) {
  const model::BlockSizes z = sizes(c);
  std::vector<Buffer> out;
  for (const model::BufferRow& r : model::block_buffer_rows(c.shape))
    if (keep(r)) out.push_back({r.what, checked_buffer_bytes(r, z, c.element_bytes())});
  return out;
}

// [n, h]·e and [N, h]·e: the stage's own tensors.
Count sequence_rows_by_hidden(const Config& c) {
  const model::BlockSizes z = sizes(c);
  return Count(z.residual_rows()) * z.h * c.element_bytes();
}
Count tokens_by_hidden(const Config& c) {
  const model::BlockSizes z = sizes(c);
  return Count(z.tokens()) * z.h * c.element_bytes();
}

// R = N·K: the copies of a micro-batch's tokens, the rows a rank's experts run at balanced load.
Count routed_rows(const Config& c) { return Count(sizes(c).tokens()) * c.shape.experts_per_token; }
// fp32 numbers (the router's, the routes'): acc_t, 4 bytes (8 with fp64 storage).
std::int64_t accumulator_bytes(const Config& c) { return std::max(4, c.element_bytes()); }

}  // namespace

std::vector<Buffer> moe_saved_buffers(const Config& c) {
  if (!c.holds_experts()) return {};
  const model::GptShape& m = c.shape;
  const Count N = sizes(c).tokens(), R = routed_rows(c), E = m.experts, K = m.experts_per_token;
  const Count e = c.element_bytes(), acc = accumulator_bytes(c), f_t = m.local_expert_ffn();
  return {{"MoE router probabilities [N, E] fp32", N * E * acc},
          {"MoE router log sum exp [N] fp32", N * acc},
          {"MoE routes: expert and row of each copy [N, K] int32, twice", 2 * N * K * 4},
          {"MoE routes: weight of each copy [N, K] fp32", N * K * acc},
          {"MoE expert input rows [N K, h]", R * m.hidden * e},
          {"MoE experts' gate and up [N K, 2f/t]", R * (2 * f_t) * e},
          {"MoE expert outputs back home [N K, h]", R * m.hidden * e},
          {"MoE shared experts' gate and up [N, 2 n_s f_e/t]", N * 2 * m.local_shared_ffn() * e}};
}

std::vector<Buffer> moe_scratch(const Config& c) {
  if (!c.holds_experts()) return {};
  const model::GptShape& m = c.shape;
  const Count N = sizes(c).tokens(), R = routed_rows(c), E = m.experts, K = m.experts_per_token;
  const Count e = c.element_bytes(), acc = accumulator_bytes(c), f_t = m.local_expert_ffn(), rows = R * m.hidden * e;
  const Count shared_t = m.local_shared_ffn();
  const bool ep = c.expert() > 1, sp = c.sequence_parallel && m.tensor > 1;
  return {{"MoE silu(gate) up [N K, f/t]", R * f_t * e},
          {"MoE silu(gate) up's gradient [N K, f/t]", R * f_t * e},
          {"MoE gate and up's gradient [N K, 2f/t]", R * (2 * f_t) * e},
          {"MoE input rows' gradient [N K, h]", rows},
          {"MoE sorted copies before the dispatch [N K, h] (expert parallel)", ep ? rows : Count(0)},
          {"MoE expert outputs before the combine [N K, h] (expert parallel)", ep ? rows : Count(0)},
          {"MoE output gradient rows [N K, h] (expert parallel)", ep ? rows : Count(0)},
          {"MoE output gradient gathered [N, h] (sequence parallel)", sp ? N * m.hidden * e : Count(0)},
          {"MoE routing weights' gradient [N, K] fp32", N * K * acc},
          {"MoE router logits' gradient [N, E] fp32", N * E * acc},
          {"MoE router statistics [G E + 1] and load-balancing gradient [G E] fp32 (G sequences, or 1)",
           (2 * E * (m.moe_aux_loss_per_sequence ? c.micro_batch : 1) + 1) * acc},
          {"MoE shared experts' silu(gate) up, then its gradient [N, n_s f_e/t]", N * shared_t * e},
          {"MoE shared experts' gate and up's gradient [N, 2 n_s f_e/t]", N * 2 * shared_t * e},
          {"MoE shared experts' output, then input gradient [N, h]", shared_t > 0 ? N * m.hidden * e : Count(0)}};
}

std::int64_t total_bytes(const std::vector<Buffer>& buffers) {
  Count n = 0;
  for (const Buffer& b : buffers) n += b.bytes;
  return n;
}

std::vector<Buffer> layer_activations(const Config& c) {
  std::vector<Buffer> out =
      block_buffers(c, [&](const model::BufferRow& r) { return model::kept_per_layer(r, c.recompute); });
  if (c.recompute != Recompute::full)
    for (Buffer& b : moe_saved_buffers(c)) out.push_back(std::move(b));
  return out;
}

std::vector<Buffer> recompute_working_set(const Config& c) {
  std::vector<Buffer> out =
      block_buffers(c, [&](const model::BufferRow& r) { return model::in_recompute_working_set(r, c.recompute); });
  if (c.recompute == Recompute::full)
    for (Buffer& b : moe_saved_buffers(c)) out.push_back(std::move(b));
  return out;
}

int micro_batches_in_flight(int stage, int stages, int micro_batches) {
  return std::min(stages - stage, micro_batches);
}

std::int64_t stage_output(const Config& c) { return sequence_rows_by_hidden(c); }

std::int64_t stage_activation_bytes(const Config& c, int layers, int in_flight) {
  return Count(in_flight) * (Count(layers) * total_bytes(layer_activations(c)) + stage_output(c)) +
         total_bytes(recompute_working_set(c));
}

std::int64_t chunked_activation_bytes(const Config& c, int chunk_layers, const std::vector<int>& slots) {
  Count n = total_bytes(recompute_working_set(c));
  const Count chunk = Count(chunk_layers) * total_bytes(layer_activations(c)) + stage_output(c);
  for (const int k : slots) n += Count(k) * chunk;
  return n;
}

std::int64_t received_gradient_bytes(const Config& c, int buffers) { return Count(buffers) * sequence_rows_by_hidden(c); }

std::int64_t final_norm_output(const Config& c) { return sequence_rows_by_hidden(c); }
// The final norm's saved statistics (its kind's rows: LayerNorm its mean and 1/σ, RMSNorm its
// 1/rms alone), and their name: "ln_f.mean_rstd".
std::int64_t final_norm_statistics(const Config& c) {
  return Count(model::kind_buffer_rows(c.shape, model::kFinalNormPlace).size()) * Count(sizes(c).residual_rows()) *
         kStatistic;
}
std::string final_norm_statistics_name(const Config& c) {
  std::string name;
  for (const model::BufferRow& r : model::kind_buffer_rows(c.shape, model::kFinalNormPlace)) {
    const std::string row = r.name;  // "/ln_f.mean"
    name += (name.empty() ? row.substr(1) : "_" + row.substr(row.find('.') + 1));
  }
  return name;
}
std::int64_t logits_and_gradient(const Config& c) {  // one buffer: the gradient is written over the logits
  return Count(sizes(c).tokens()) * c.shape.local_vocab() * c.element_bytes();
}
std::int64_t loss_vectors(const Config& c) { return 4 * Count(sizes(c).tokens()) * kStatistic; }

std::vector<Buffer> head_buffers(const Config& c) {
  return {{"ln_f.out", final_norm_output(c)},
          {final_norm_statistics_name(c), final_norm_statistics(c)},
          {"logits, overwritten by their gradient", logits_and_gradient(c)},
          {"loss vectors", loss_vectors(c)}};
}

// The block's own scratch, then the attention's and the MLP's in their shared region (the larger
// part, each buffer aligned as the Workspace places it; of the model's largest block shape, as
// model::phase_region_bytes, checked). A mixture of experts builds no dense MLP: without
// DeepSeek-V3's dense first blocks the region is the attention's, and its own scratch follows.
std::vector<Buffer> block_scratch(const Config& c) {
  std::vector<Buffer> out = block_buffers(c, [](const model::BufferRow& r) {
    return r.lifetime == model::Lifetime::scratch && r.phase == model::ScratchPhase::block;
  });
  const model::BlockSizes z = sizes(c);
  const std::vector<model::BlockShapeCount> shapes = model::block_shapes(c.shape);
  Count region = 0;
  for (const model::BlockShapeCount& b : shapes) {
    Count part[3] = {0, 0, 0};
    for (const model::BufferRow& r : model::block_buffer_rows(b.shape))
      if (r.lifetime == model::Lifetime::scratch && r.phase != model::ScratchPhase::block) {
        const Count aligned = (checked_buffer_bytes(r, z, c.element_bytes()) + Count(model::kPhaseAlignment - 1)) /
                              Count(model::kPhaseAlignment) * Count(model::kPhaseAlignment);
        part[static_cast<int>(r.phase)] += aligned;
      }
    region = std::max({region, part[1], part[2]});
  }
  out.push_back({c.holds_experts() && shapes.size() == 1
                     ? "the attention's scratch (its region; no dense MLP)"
                     : "the attention's and the MLP's scratch, one region (the larger part)",
                 region});
  for (Buffer& b : moe_scratch(c)) out.push_back(std::move(b));
  return out;
}
std::int64_t stage_gradients(const Config& c) { return 2 * sequence_rows_by_hidden(c); }
std::int64_t sequence_parallel_buffers(const Config& c) {
  return c.sequence_parallel && c.shape.tensor > 1 ? 2 * tokens_by_hidden(c) : Count(0);  // off with one tensor rank
}

std::vector<Buffer> workspace_buffers(const Config& c) {
  std::vector<Buffer> all = block_scratch(c);
  all.push_back({"the stage's gradient ping-pong", stage_gradients(c)});
  all.push_back({"sequence-parallel gather and reduce-scatter buffers", sequence_parallel_buffers(c)});
  return all;
}

}  // namespace tptrain::plan
