// What the plan tests hold the planner's buffers to: the bytes a model stage of a plan's config
// allocates, and the bytes the planner counts for it.
#pragma once

#include <cstdint>
#include <string>

#include "src/model/gpt_model.hpp"
#include "src/plan/activation_memory.hpp"
#include "src/plan/plan_config.hpp"

namespace tptrain::test {

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
