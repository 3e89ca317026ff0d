// What the plan tests share: Llama shapes and a small Llama configuration whose buffers are easy
// to count by hand, and what they hold the planner's buffers to: the bytes a model stage of a
// plan's config allocates, and the bytes the planner counts for it.
#pragma once

#include <cstdint>
#include <string>

#include "src/model/gpt_model.hpp"
#include "src/plan/activation_memory.hpp"
#include "src/plan/plan_config.hpp"

namespace tptrain::test {

inline model::GptShape llama(int layers, int hidden, int heads, int kv_heads, int ffn, int vocab, int seq) {
  model::GptShape s;
  static_cast<model::BlockSpec&>(s) = model::block_preset("llama")->spec;
  s.tie_embeddings = false;
  s.layers = layers;
  s.hidden = hidden;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.ffn_hidden = ffn;
  s.vocab_size = vocab;
  s.seq_length = seq;
  s.vocab_pad_multiple = 128;
  return s;
}

// A small llama configuration whose buffers are easy to count by hand: h 32, a 4 (d 8), k 2,
// f 48, s 16 (seq_length), b 2, pipeline 2, data 2.
// flash = false: the batched attention core (its S×S buffers counted).
inline plan::Config small_llama(int tensor, bool sp, model::Recompute r, const std::string& precision,
                                int kv_heads = 2, bool flash = false, int seq_length = 16) {
  plan::Config c;
  c.shape = llama(4, 32, 4, kv_heads, 48, 250, seq_length);
  c.shape.flash_attention = flash;
  c.shape.vocab_pad_multiple = 8;
  c.shape.tensor = tensor;
  c.pipeline = 2;
  c.data = 2;
  c.global_batch = 16;
  c.micro_batch = 2;
  c.sequence_parallel = sp;
  c.recompute = r;
  c.precision = precision;
  return c;
}

// The workspace of stage 0 of config c's model, built on this rank of `tp` (and `cp` under
// context parallelism) with `slots` micro-batches in flight, in c's precision; without the
// column-sum partials, which the planner counts elsewhere.
inline std::int64_t allocated_stage_bytes(const plan::Config& c, parallel::Communicator& tp,
                                          parallel::Communicator* cp, model::Recompute r, int slots) {
  const auto count = [&](auto tag) {
    using T = decltype(tag);
    model::GptModel<T> m(c.shape, c.micro_batch, tp, 1, model::PipelineStage{}, r, {}, cp);
    m.reserve_slots(slots);
    std::size_t column_sums = 0;
    for (const auto& e : m.workspace().entries())
      if (e.name == "column_sums") column_sums += e.bytes;
    return static_cast<std::int64_t>(m.workspace().total_bytes() - column_sums);
  };
  return c.precision == "fp32" ? count(float()) : count(kx::bf16());
}

// The planner's count of the same: the stage's activations, the head and the workspace.
inline std::int64_t planned_stage_bytes(const plan::Config& c, int slots) {
  return plan::stage_activation_bytes(c, c.shape.layers, slots) + plan::total_bytes(plan::head_buffers(c)) +
         plan::total_bytes(plan::workspace_buffers(c));
}

}  // namespace tptrain::test
