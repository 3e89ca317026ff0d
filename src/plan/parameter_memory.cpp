#include "src/plan/parameter_memory.hpp"

namespace tptrain::plan {

ParameterBytes parameter_bytes(std::vector<model::BucketExtent> buckets, const Config& c) {
  const bool sharded = c.distributed_optimizer || c.shard_gradients || c.shard_parameters;
  const bool shard_gradients = c.shard_gradients || c.shard_parameters;
  ParameterBytes b;
  for (model::BucketExtent& bucket : buckets) {
    // The dense parameters' state is split over data x context, the experts' over the expert-data group.
    bucket.shards = sharded ? int(bucket.expert ? c.expert_data_context() : c.shard_ranks()) : 1;
    const Count n = bucket.count, owned = Count(bucket.owned()) * n, padded = Count(bucket.padded()) * n;
    b.weights += (bucket.gathered(c.shard_parameters) ? owned : padded) * c.element_bytes();
    b.master += c.element_bytes() == 4 ? Count(0) : owned * 4;  // fp32: the master is the weights
    b.gradients += (bucket.pooled(shard_gradients) ? owned : padded) * 4;
    b.optimizer += owned * 8;
    b.checkpoint_host += owned * 12;
  }
  const model::GradientPool pool = model::gradient_pool(buckets, shard_gradients);
  b.gradients += Count(pool.slots) * pool.slot_elements * 4;
  b.gathered_weights =
      Count(model::gathered_weights(buckets, c.shard_parameters, c.reshard_after_forward)) * c.element_bytes();
  b.weights += b.gathered_weights;
  return b;
}

ParameterBytes parameter_bytes(std::int64_t parameters, const Config& c, std::int64_t expert_parameters) {
  model::BucketExtent dense, experts;
  dense.elements = parameters - expert_parameters;
  experts.elements = expert_parameters;
  experts.expert = true;
  experts.step = 1;
  return parameter_bytes({dense, experts}, c);
}

}  // namespace tptrain::plan
