// Bytes of parameters, gradients and optimizer state on one rank (docs/planning.md, "Memory"),
// Megatron's accounting, which TrainingRun::parameter_memory() measures from the allocated
// buffers (src/train/training_run.cpp):
//
//   fp32        weights 4 + gradients 4 + AdamW moments 8                  = 16 bytes per parameter
//   bf16, fp16  weights 2 + fp32 master 4 + fp32 gradients 4 + moments 8   = 18
//
// With the distributed optimizer (optimizer.distributed, ZeRO-1) over d ranks — data x context:
// the group gradients are summed over (src/parallel/topology.hpp, dp_cp) — each rank keeps 1/d of
// the optimizer's own state: the moments, and with 16-bit weights the fp32 master: fp32 8 + 8/d
// bytes, bf16/fp16 6 + 12/d (Megatron-LM's distributed optimizer table).
// A shard is ⌈n/d⌉ elements.
//
// A mixture of experts' expert parameters (parallel.expert = ep) are summed over the expert-data
// group instead — the data / ep ranks that hold the same experts, x context — and the distributed
// optimizer shards them over it: the dense parameters' state is 1/(d·C) per rank, the experts'
// 1/((d/ep)·C) (Config::expert_data_context).
//
// With sharded gradients (optimizer.shard = "gradients", ZeRO-2) the fp32 gradients are 4/d too,
// but for the word embedding's bucket when the head writes it (tied, multi-token prediction), plus
// the pool of whole buckets a backward writes into (a few of the largest block's): fp32 4 + 12/d,
// bf16 2 + 16/d, + the pool.
//
// With sharded parameters ("parameters", ZeRO-3) the weights are e/d too, but the word embedding
// that keeps its whole gradient, plus the arena of gathered weights (gathered_weights: two
// modules', the one computing and the one prefetched; every gathered module's without
// optimizer.reshard_after_forward): fp32 16/d, bf16 18/d, + the pool and the arena.
#pragma once

#include <cstdint>
#include <vector>

#include "src/model/spec/gradient_buckets.hpp"
#include "src/plan/count.hpp"
#include "src/plan/plan_config.hpp"

namespace tptrain::plan {

struct ParameterBytes {
  std::int64_t weights = 0;    // the copy the model computes with (fp32, or bf16/fp16)
  std::int64_t master = 0;     // fp32 master weights (16-bit precisions only)
  std::int64_t gradients = 0;  // fp32, accumulated over micro-batches
  std::int64_t optimizer = 0;  // AdamW's two fp32 moments
  // Of `weights`: sharded parameters' arena of gathered weights (its largest working set).
  std::int64_t gathered_weights = 0;
  std::int64_t total() const { return Count(weights) + master + gradients + optimizer; }
  // Host memory, not the device's: a checkpoint's copy of the fp32 master weights and both
  // moments of this rank's shard, held while the file is written (from the first checkpoint on
  // with checkpoint.async; pinned on CUDA).
  std::int64_t checkpoint_host = 0;
};

// One rank holding the gradient buckets `buckets` (stage_buckets: unsplit, their shards are c's)
// under c's precision and sharding, exactly as GptModel allocates them: each bucket padded to a
// multiple of its shards, and with sharded gradients the pool of whole-bucket gradients
// (src/model/spec/gradient_buckets.hpp).
ParameterBytes parameter_bytes(std::vector<model::BucketExtent> buckets, const Config& c);
// The same for `parameters` elements in two buckets, `expert_parameters` of them experts' (the
// state of the rest sharded over data x context, theirs over the expert-data group).
ParameterBytes parameter_bytes(std::int64_t parameters, const Config& c, std::int64_t expert_parameters = 0);

}  // namespace tptrain::plan
