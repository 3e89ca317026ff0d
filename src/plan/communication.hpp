// Bytes one rank sends per training step over each of its communicators (docs/planning.md,
// "Communication"). Collectives are costed as ring algorithms (NCCL's, for large messages): over
// k ranks an all-reduce of S bytes sends 2(k−1)/k·S per rank, an all-gather or a reduce-scatter
// (S the gathered size) (k−1)/k·S. Small reductions (gradient norm, loss, overflow flags) are
// left out.
//
// N = b·s is a micro-batch's tokens on one rank (s = seq_length / C with context parallelism).
// Tensor-parallel group, per micro-batch and layer, A = [N, h]·e:
//   forward   2 all-reduces (g after the attention and MLP projections);
//             with sequence parallelism 2 all-gathers + 2 reduce-scatters: the same bytes
//   backward  2 all-reduces (f before QKV and fc); with sequence parallelism 2 reduce-scatters
//             + 2 all-gathers, plus 2 all-gathers that gather the stored [n, h] LayerNorm outputs
//             again for the weight gradients of QKV and fc
//   full recomputation runs the forward's collectives once more;
// plus the embedding's g (first stage), the logits' f and the cross-entropy's three fp32 [N]
// all-reduces (last stage).
// Pipeline group: per micro-batch the stage output [n, h]·e to the next stage and its gradient
// to the previous one.
// Context-parallel group (parallel.context = C > 1; src/model/ring_attention.hpp), per
// micro-batch and layer, point to point around the ring, KV = [N, 2·(k/t)·d]·e the rank's keys
// and values (k kv_heads, d head dim):
//   forward   C − 1 sends of a KV block
//   backward  C − 1 sends of a KV block, and C of its dK, dV sums (fp32, [N, 2·(k/t)·d]·4)
//   full recomputation runs the forward's ring once more.
// Data-parallel group, once per step, over data x context ranks (the gradient's group: each
// context rank computed its chunks' part): the stage's fp32 gradients all-reduced, or with the
// distributed optimizer reduce-scattered (fp32) and the updated weights all-gathered (in the
// compute precision); with sharded gradients (ZeRO-2) the reduce-scatter of every bucket but
// the word embedding's whole one once per micro-batch.
// Expert-parallel group (parallel.expert = ep > 1, model.mlp = "moe"; src/model/mixture_of_experts.hpp),
// per micro-batch and layer: all-to-alls of the rank's R = N·K token copies, [R, h]·e, of which
// (ep − 1)/ep go to other ranks at balanced load (every expert receiving N·K/E copies):
//   forward   2 (the copies to their experts' ranks, the outputs back)
//   backward  2 (the output gradients out, the input gradients back)
//   full recomputation runs the forward's 2 once more.
// Every tensor rank of a group exchanges the same rows over its own expert group. The mixture adds
// to the tensor group, per micro-batch and layer, the backward's all-reduce of the routing
// weights' gradient ([N, K] fp32); its entry and exit collectives are the dense MLP's.
// With a mixture of experts the data row carries the dense parameters' gradients, and the expert
// data row the experts': over the expert-data group (data / ep ranks that hold the same experts,
// x context), all-reduced or reduce-scattered and all-gathered as the data row.
// Embedding group (first and last stage, pipeline > 1): the word embedding's fp32 gradient
// shard [V_pad/t, h] all-reduced between the two copies.
#pragma once

#include <cstdint>

#include "src/plan/parameter_count.hpp"
#include "src/plan/plan_config.hpp"

namespace tptrain::plan {

double all_reduce_bytes(double bytes, std::int64_t ranks);  // sent per rank, ring
double all_gather_bytes(double bytes, std::int64_t ranks);  // also a reduce-scatter; `bytes` the full size

struct StepCommunication {
  double tensor = 0;     // bytes sent per rank per step over the tensor-parallel group
  double context = 0;    // ... around the context-parallel ring (ring attention)
  double pipeline = 0;   // ... to the neighbouring stages
  double data = 0;       // ... over the data x context group (the gradients; a mixture's dense ones),
                         // or with hybrid sharding over the shard group
  double data_replicas = 0;  // hybrid sharding: ... over the replica group (the shards' sum)
  double embedding = 0;  // ... over the embedding group (first and last stage)
  double expert = 0;       // ... by all-to-all over the expert-parallel group (a mixture of experts)
  double expert_data = 0;  // ... over the expert-data group (the experts' gradients)
};

// One all-to-all of the mixture of experts: the rank's [N·K, h]·e token copies (or their
// gradients), of which (ep − 1)/ep leave the rank at balanced load.
double expert_all_to_all_bytes(const Config& c);
// All-to-alls per layer and micro-batch: 2 forward, 2 backward, 2 more with full recomputation;
// 0 without expert parallelism.
int expert_all_to_alls(const Config& c);
// Bytes one rank sends by all-to-all for one layer and one micro-batch: the product of the two,
// times (ep − 1)/ep.
double expert_layer_bytes(const Config& c);

// One K,V block of ring attention: [N, 2·(k/t)·d]·e, the rank's keys and values of a micro-batch.
double context_kv_block_bytes(const Config& c);
// Bytes one rank sends around the context ring for one layer and one micro-batch (forward,
// backward and, with full recomputation, the forward again); 0 without context parallelism.
double context_layer_bytes(const Config& c);

// Bytes two neighbouring pipeline stages exchange per step, both directions together: every
// micro-batch's stage output forward and its gradient backward.
double pipeline_link_bytes(const Config& c);

// Stage `stage` of c.pipeline holding `stage_parameters` elements on each rank, `expert_parameters`
// of them experts' (StageParameters::experts).
StepCommunication stage_communication(const Config& c, int stage, std::int64_t stage_parameters,
                                      std::int64_t expert_parameters = 0);

// The most any stage sends over each group (each figure may come from another stage). The stages
// between the first and the last send the same, so three stages are compared whatever the
// pipeline size.
StepCommunication busiest_communication(const Config& c, const StageParameters& stage_parameters);

}  // namespace tptrain::plan
