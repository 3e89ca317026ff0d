#include "src/plan/parameter_memory.hpp"

namespace tptrain::plan {

ParameterBytes parameter_bytes(std::int64_t parameters, const Config& c, std::int64_t expert_parameters) {
  const Count n = parameters, experts = expert_parameters, dense = n - experts;
  // The optimizer state's share of this rank: ⌈n/d⌉ of each group's parameters, the dense ones
  // sharded over data x context, the experts' over the expert-data group.
  const auto shard = [&](Count elements, std::int64_t group) {
    const Count d = c.distributed_optimizer || c.shard_parameters ? Count(group) : Count(1);
    return (elements + d - 1) / d;
  };
  const Count sharded = shard(dense, c.data_context()) + (experts > 0 ? shard(experts, c.expert_data_context()) : Count(0));
  ParameterBytes b;
  // FSDP / ZeRO-3 (Config::shard_parameters): the weights and gradients sharded too (the blocks
  // gathered at a time are workspace).
  b.weights = (c.shard_parameters ? sharded : n) * c.element_bytes();
  b.master = c.element_bytes() == 4 ? Count(0) : sharded * 4;  // fp32: the master is the weights
  b.gradients = (c.shard_parameters ? sharded : n) * 4;
  b.optimizer = sharded * 8;
  b.checkpoint_host = sharded * 12;
  return b;
}

}  // namespace tptrain::plan
