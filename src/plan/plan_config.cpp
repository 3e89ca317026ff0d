#include "src/plan/plan_config.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "base/layout_rules.hpp"
#include "src/model/shape_of_deck.hpp"

namespace tptrain::plan {

std::string Config::layout_problem() const {
  const model::GptShape& s = shape;
  // The layout's rules (base/layout_rules.hpp), in the deck's order.
  for (const rules::Problem& p : rules::tensor_split_problems(s.heads, 0, s.tensor)) return p.text();
  for (const rules::Problem& p : rules::kv_head_problems(s.heads, s.kv_head_count(), s.tensor)) return p.text();
  for (const rules::Problem& p : rules::tensor_split_problems(0, s.ffn_hidden, s.tensor, s.moe_ffn_hidden)) return p.text();
  for (const std::string& why : expert_problems()) return why;
  for (const rules::Problem& p : rules::pipeline_problems(s.layers, pipeline)) return p.text();
  if (global_batch % (std::int64_t(micro_batch) * data) != 0)
    return fmt::format("training.global_batch = {} is not a multiple of micro_batch * data = {} * {}", global_batch,
                       micro_batch, data);
  for (const rules::Problem& p : rules::interleave_problems(s.layers, pipeline, virtual_stages, micro_batches()))
    return p.text();
  if (s.context < 1) return fmt::format("parallel.context = {}: expected an integer >= 1", s.context);
  for (const rules::Problem& p : rules::context_problems(s.seq_length, s.context)) return p.text();
  if (s.context > 1 && !context_allowed)
    return fmt::format("parallel.context = {}: ring attention runs flash attention and no training.tasks",
                       s.context);
  for (const rules::Problem& p : rules::sequence_parallel_problems(s.seq_length, s.context, s.tensor, sequence_parallel))
    return p.text();
  if (shard_group > 0 && data_context() % shard_group != 0)
    return fmt::format("parallel.shard_group = {} is not a divisor of data x context = {}", shard_group, data_context());
  if (shard_group > 0 && !distributed_optimizer)
    return fmt::format("parallel.shard_group = {} with optimizer.shard = \"none\"", shard_group);
  return {};
}

std::vector<std::string> Config::expert_problems() const {
  const model::GptShape& s = shape;
  if (s.expert < 1) return {fmt::format("parallel.expert = {}: expected an integer >= 1", s.expert)};
  std::vector<std::string> out;
  for (const rules::Problem& p : rules::expert_problems(model::holds_experts(s), s.experts, s.expert, data))
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
  c.set_shard(d.optimizer.shard);
  c.reshard_after_forward = d.optimizer.reshard_after_forward;
  c.shard_group = d.parallel.shard_group;
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
