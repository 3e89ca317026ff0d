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
// With sharded parameters ("parameters", ZeRO-3) the gradients are sharded as with "gradients", and
// a bucket whose gradient is pooled keeps only its owned shard of the compute weights too: its
// whole weights are all-gathered into the arena of gathered weights (gathered_weights) while its
// module computes. The word embedding's bucket that keeps its whole gradient keeps its whole
// weights too (the head reads them, in another module than the embedding's).
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
  bool gathered(bool shard_parameters) const { return pooled(shard_parameters); }
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

// The arena the gathered weights of sharded parameters live in while their module computes, in
// elements (each bucket at a fixed place in it, GptModel::make_buckets). A step of the backward is
// one module (a block: its dense and expert buckets; the head with multi-token prediction's; the
// embedding). With reshard_after_forward a module's weights are freed after each forward and
// backward, and the next module's gather is prefetched while it computes: two regions, the modules
// of even steps in the first, of odd steps in the second, each as long as the largest module's
// gathered buckets end to end (one region when one module is gathered). Without it a module's
// weights stay gathered from its forward to its backward: every gathered bucket its own place.
struct GatheredModules {
  std::int64_t modules = 0;  // the modules with gathered buckets
  std::int64_t largest = 0;  // the largest module's gathered buckets end to end, in elements
  std::int64_t all = 0;      // every gathered bucket end to end
  std::int64_t arena(bool reshard_after_forward) const {
    return reshard_after_forward ? std::min<std::int64_t>(modules, 2) * largest : all;
  }
};
inline GatheredModules gathered_modules(const std::vector<BucketExtent>& buckets, bool shard_parameters) {
  std::map<int, std::int64_t> per_step;  // a module's gathered elements, by step
  std::map<int, std::int64_t> modules;   // the modules of a step number (its buckets' count)
  GatheredModules g;
  for (const BucketExtent& b : buckets)
    if (b.gathered(shard_parameters) && b.count > 0) {
      per_step[b.step] += b.padded();
      modules[b.step] = std::max(modules[b.step], b.count);
      g.all += b.padded() * b.count;
    }
  for (const auto& [step, n] : per_step) {
    g.largest = std::max(g.largest, n);
    g.modules += modules[step];
  }
  return g;
}
inline std::int64_t gathered_weights(const std::vector<BucketExtent>& buckets, bool shard_parameters,
                                     bool reshard_after_forward) {
  return gathered_modules(buckets, shard_parameters).arena(reshard_after_forward);
}
// Where each of a model's buckets (count 1 each, in backward order) sits in that arena: -1 for one
// not gathered.
inline std::vector<std::int64_t> gathered_weight_offsets(const std::vector<BucketExtent>& buckets,
                                                         bool shard_parameters, bool reshard_after_forward) {
  const GatheredModules g = gathered_modules(buckets, shard_parameters);
  std::map<int, std::int64_t> within;  // the module's buckets placed so far, by step
  std::vector<std::int64_t> offsets;
  std::int64_t next = 0;
  for (const BucketExtent& b : buckets) {
    if (!b.gathered(shard_parameters)) {
      offsets.push_back(-1);
    } else if (!reshard_after_forward) {
      offsets.push_back(next);
      next += b.padded();
    } else {
      offsets.push_back((g.modules > 1 ? (b.step % 2) * g.largest : 0) + within[b.step]);
      within[b.step] += b.padded();
    }
  }
  return offsets;
}

}  // namespace tptrain::model
