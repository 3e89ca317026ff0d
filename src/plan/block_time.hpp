// What one micro-batch costs one rank in a transformer block, its embedding and its head, as the
// kernels and collectives it runs in order (docs/planning.md, "One block"): the GEMMs of the
// block descriptor's matrices (src/model/model_flops.hpp counts the same ones), the attention
// core (model::attention_flops_per_sequence: flash's causal skip, or the batched full square),
// the memory-bound kernels by the bytes they move, and the collectives that stop the compute
// stream in tptrain's layers: the tensor-parallel all-reduces (or, with sequence parallelism,
// all-gathers and reduce-scatters), the experts' all-to-alls, and ring attention's transfers
// under context parallelism, played through ring_forward_ops / ring_backward_ops
// (src/schedule/ring_schedule.hpp) so that only their part not hidden by the blocks' compute shows.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "src/plan/collective_cost.hpp"
#include "src/plan/machine.hpp"
#include "src/plan/plan_config.hpp"

namespace tptrain::plan {

// The streams of a rank: its compute, and each communicator's (what a trace shows as threads).
enum class Stream { compute = 0, tensor, context, expert, pipeline, data };
inline constexpr int kStreams = 6;
const char* stream_name(Stream s);

// One kernel, or the part of a collective the compute stream waits for.
struct Kernel {
  const char* name = "";
  Stream stream = Stream::compute;
  double seconds = 0;
};

// Kernels run one after another; `on` the seconds by stream.
struct Pass {
  std::vector<Kernel> kernels;
  std::array<double, kStreams> on{};
  double seconds = 0;
  // Of `seconds`, the wait for the busiest expert rank's experts: the other expert ranks idle in it.
  double busiest_wait = 0;
  void add(const char* name, Stream s, double t);
  void append(const Pass& other);
};

// The groups one rank's collectives span (parallel.order, node by node).
struct Spans {
  GroupSpan tensor, context, expert, data, expert_data, embedding;
  // Hybrid sharding (Config::shard_group): the shard group and the replica group; without it
  // `shard` is `data` and `replica` one rank.
  GroupSpan shard, replica;
  bool pipeline_next_across = false, pipeline_previous_across = false;
};

struct BlockTimes {
  Pass forward;   // one block's forward of one micro-batch
  Pass backward;  // its backward, the recomputed forward first (recompute = full)
  Pass embedding_forward, embedding_backward;  // the first virtual stage's
  Pass head_forward, head_backward;            // the last virtual stage's: ln_f, logits, loss
  // FSDP / ZeRO-3 (Config::shard_parameters): what a chunk of `layers_per_chunk` blocks waits
  // for of its weights' all-gathers (forward and backward) and its gradients' reduce-scatters,
  // one block prefetched ahead of the one computing: the first block's gather, then each
  // block's part the previous block's compute does not hide, then (backward) the last
  // reduce-scatter. The embedding's and the head's weights (the root module's) are gathered in
  // embedding_forward and their gradients reduce-scattered in embedding_backward.
  Pass sharded_forward, sharded_backward;
  double block_gradient_bytes = 0;         // fp32 gradients of one block's dense parameters on a rank
  double block_expert_gradient_bytes = 0;  // ... of its experts'
  double pipeline_message_bytes = 0;       // a stage's output for one micro-batch ([n, h]·e)
};

BlockTimes block_times(const Config& c, const Machine& m, const Spans& spans);

}  // namespace tptrain::plan
