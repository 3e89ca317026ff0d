#include "src/plan/parameter_memory.hpp"

namespace tptrain::plan {

ParameterBytes parameter_bytes(std::int64_t parameters, const Config& c) {
  const Count n = parameters;
  const Count d = c.distributed_optimizer ? Count(c.data_context()) : Count(1);  // sharded over data x context
  const Count shard = (n + d - 1) / d;  // the optimizer state's share of this rank
  ParameterBytes b;
  b.weights = n * c.element_bytes();
  b.master = c.element_bytes() == 4 ? Count(0) : shard * 4;  // fp32: the master is the weights
  b.gradients = n * 4;
  b.optimizer = shard * 8;
  b.checkpoint_host = shard * 12;
  return b;
}

}  // namespace tptrain::plan
