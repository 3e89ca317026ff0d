// How a stage's gradient buckets (model::GradBucket) are split over the data-parallel group and
// held, as counts: what GptModel allocates and what the planner counts (src/plan/parameter_memory)
// from the same rules.
//
// With the optimizer state sharded over d ranks (optimizer.shard = "optimizer", ZeRO-1) a bucket of
// n elements is padded to d·⌈n/d⌉ and rank r owns [r·⌈n/d⌉, (r+1)·⌈n/d⌉). With sharded gradients
// ("gradients", ZeRO-2) a bucket keeps only its owned shard of the gradient between micro-batches;
// its whole gradient is a slot of a pool while a backward writes it and its reduce-scatter runs
// (GradBucket::pooled). The word embedding's bucket keeps its whole gradient when the head writes
// it too (a tied output layer, multi-token prediction's embeddings): on one stage its gradient
// comes from both ends of the backward, and across stages the two copies' gradients are summed
// whole over the embedding group.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

namespace tptrain::model {

// One bucket as the sharding sees it.
struct BucketExtent {
  std::int64_t elements = 0;  // the parameters' local elements (GradBucket::used)
  int shards = 1;             // the ranks its optimizer state is split over (1: not split)
  bool expert = false;        // a mixture's experts: split over the expert-data group
  bool keeps_whole = false;   // its gradient stays whole under sharded gradients (see above)
  int step = 0;               // buckets one step of the backward writes together share a step
  // `count` alike buckets, in as many steps of the backward (the planner's blocks of one shape,
  // each step holding one of every bucket of its step number): sums multiply by it.
  std::int64_t count = 1;
  std::int64_t owned() const { return (elements + shards - 1) / shards; }
  std::int64_t padded() const { return shards > 1 ? shards * owned() : elements; }
  bool pooled(bool shard_gradients) const { return shard_gradients && shards > 1 && elements > 0 && !keeps_whole; }
};

// The pool of whole-bucket gradients under sharded gradients: as many slots as one step of the
// backward writes pooled buckets at once (the head's, mtp's and mtp's experts'; a block's dense
// and expert buckets), plus one in which the previous ones' reduce-scatters finish, no more than
// there are pooled buckets; each as long as the longest pooled bucket.
struct GradientPool {
  int slots = 0;
  std::int64_t slot_elements = 0;
};
inline GradientPool gradient_pool(const std::vector<BucketExtent>& buckets, bool shard_gradients) {
  std::map<int, int> per_step;
  GradientPool pool;
  std::int64_t pooled = 0;
  int held = 0;
  for (const BucketExtent& b : buckets)
    if (b.pooled(shard_gradients) && b.count > 0) {
      pooled += b.count;
      held = std::max(held, ++per_step[b.step]);
      pool.slot_elements = std::max(pool.slot_elements, b.padded());
    }
  pool.slots = int(std::min<std::int64_t>(held + 1, pooled));
  return pool;
}

}  // namespace tptrain::model
