#include "src/plan/plan_config.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "base/layout_rules.hpp"
#include "src/model/shape_of_deck.hpp"

namespace tptrain::plan {

std::string Config::layout_problem() const {
  const model::GptShape& s = shape;
  if (s.heads % s.tensor != 0) return fmt::format("model.heads = {} is not a multiple of parallel.tensor = {}", s.heads, s.tensor);
  for (const rules::Problem& p : rules::kv_head_problems(s.heads, s.kv_head_count(), s.tensor)) return p.text();
  if (s.ffn_hidden % s.tensor != 0)
    return fmt::format("model.ffn_hidden = {} is not a multiple of parallel.tensor = {}", s.ffn_hidden, s.tensor);
  for (const std::string& why : expert_problems()) return why;
  if (s.layers % pipeline != 0)
    return fmt::format("model.layers = {} is not a multiple of parallel.pipeline = {}", s.layers, pipeline);
  if (global_batch % (std::int64_t(micro_batch) * data) != 0)
    return fmt::format("training.global_batch = {} is not a multiple of micro_batch * data = {} * {}", global_batch,
                       micro_batch, data);
  for (const rules::Problem& p : rules::interleave_problems(s.layers, pipeline, virtual_stages, micro_batches()))
    return p.text();
  if (s.context < 1) return fmt::format("parallel.context = {}: expected an integer >= 1", s.context);
  if (s.context > 1 && s.seq_length % (2 * s.context) != 0)
    return fmt::format("model.seq_length = {} is not a multiple of 2 * parallel.context = {} (context parallelism "
                       "cuts every sequence into 2 * parallel.context chunks)",
                       s.seq_length, 2 * s.context);
  if (s.context > 1 && !context_allowed)
    return fmt::format("parallel.context = {}: ring attention runs flash attention and no training.tasks",
                       s.context);
  if (sequence_parallel && s.local_seq_length() % s.tensor != 0)
    return s.context > 1 ? fmt::format("model.seq_length / parallel.context = {} / {} is not a multiple of "
                                       "parallel.tensor = {} (sequence parallelism)",
                                       s.seq_length, s.context, s.tensor)
                         : fmt::format("model.seq_length = {} is not a multiple of parallel.tensor = {} (sequence "
                                       "parallelism)",
                                       s.seq_length, s.tensor);
  return {};
}

std::vector<std::string> Config::expert_problems() const {
  const model::GptShape& s = shape;
  if (s.expert_parallel < 1) return {fmt::format("parallel.expert = {}: expected an integer >= 1", s.expert_parallel)};
  std::vector<std::string> out;
  for (const rules::Problem& p : rules::expert_problems(s.moe(), s.experts, s.expert_parallel, data))
    out.push_back(p.text());
  return out;
}

Config config_of(const io::Deck& d) {
  Config c;
  c.shape = model::shape_of(d);
  // Config::sequence_parallel is the plan's switch (the layout search varies it, with the tensor
  // size); the shape's copy would make GptShape::validate judge candidates by the deck's choice.
  c.shape.sequence_parallel = false;
  c.pipeline = d.parallel.pipeline;
  c.virtual_stages = std::max(1, d.parallel.virtual_stages);
  c.data = d.parallel.data;
  c.sequence_parallel = d.parallel.sequence_parallel;
  c.global_batch = d.training.global_batch;
  c.micro_batch = d.training.micro_batch;
  c.precision = d.training.precision;
  c.recompute = model::recompute_from_name(d.training.recompute);
  c.distributed_optimizer = d.optimizer.distributed;
  c.async_checkpoint = d.checkpoint.async;
  c.order = parallel::rank_order_from_name(d.parallel.order);
  // shape_of has set shape.context (parallel.context) and the attention core it implies.
  c.context_allowed = d.training.attention != "batched" && d.training.tasks.empty();
  c.attention = d.training.attention;
  return c;
}

void Config::set_context(int cp) {
  shape.context = cp;
  shape.flash_attention = model::flash_attention_of(attention, cp);
}

}  // namespace tptrain::plan
