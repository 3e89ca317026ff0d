#include "src/plan/communication.hpp"

#include <algorithm>

namespace tptrain::plan {

double all_reduce_bytes(double bytes, std::int64_t ranks) {
  return ranks <= 1 ? 0.0 : 2.0 * double(ranks - 1) / double(ranks) * bytes;
}
double all_gather_bytes(double bytes, std::int64_t ranks) {
  return ranks <= 1 ? 0.0 : double(ranks - 1) / double(ranks) * bytes;
}

namespace {

// N: the tokens of a micro-batch on one rank, b·S/C.
double local_tokens(const Config& c) { return double(c.micro_batch) * c.shape.local_seq_length(); }

}  // namespace

double pipeline_link_bytes(const Config& c) {
  const model::GptShape& m = c.shape;
  const double N = local_tokens(c);
  const double boundary = (c.sequence_parallel ? N / m.tensor : N) * m.hidden * c.element_bytes();
  return 2 * double(c.micro_batches()) * boundary;
}

double context_kv_block_bytes(const Config& c) {
  const model::GptShape& s = c.shape;  // K and V of the rank's key/value heads (MLA: d_q and d_v wide)
  const double width = s.latent_attention() ? double(s.local_heads()) * (s.qk_head_dim() + s.value_head_dim())
                                            : 2.0 * s.local_kv_heads() * s.head_dim();
  return local_tokens(c) * width * c.element_bytes();
}

double context_layer_bytes(const Config& c) {
  const int C = c.shape.context;
  if (C <= 1) return 0.0;
  // The K,V block in the storage type; its dK, dV sums in fp32 (4 bytes, as the block's e at most).
  const double kv = context_kv_block_bytes(c), dkv = kv / c.element_bytes() * 4;
  const double forward = (C - 1) * kv;
  const double backward = (C - 1) * kv + C * dkv;
  return forward + backward + (c.recompute == Recompute::full ? forward : 0.0);
}

double expert_all_to_all_bytes(const Config& c) {
  return c.holds_experts() ? local_tokens(c) * c.shape.experts_per_token * c.shape.hidden * c.element_bytes() : 0.0;
}

int expert_all_to_alls(const Config& c) {
  if (!c.holds_experts() || c.expert() <= 1) return 0;
  return 4 + (c.recompute == Recompute::full ? 2 : 0);
}

double expert_layer_bytes(const Config& c) {
  const int ep = c.expert();
  if (ep <= 1) return 0.0;
  return expert_all_to_alls(c) * expert_all_to_all_bytes(c) * double(ep - 1) / double(ep);
}

StepCommunication stage_communication(const Config& c, int stage, std::int64_t stage_parameters,
                                      std::int64_t expert_parameters) {
  const model::GptShape& m = c.shape;
  const int t = m.tensor, P = c.pipeline;
  const bool first = stage == 0, last = stage == P - 1, sp = c.sequence_parallel;
  const double e = c.element_bytes();
  const double N = local_tokens(c);
  const double A = N * m.hidden * e;  // one [N, h] activation
  const double layers = double(m.layers) / P;
  const double M = c.micro_batches();
  StepCommunication out;

  // Tensor-parallel group, per micro-batch.
  const double forward = 2 * all_reduce_bytes(A, t);  // = 2 all-gathers + 2 reduce-scatters with SP
  const double backward = 2 * all_reduce_bytes(A, t) + (sp ? 2 * all_gather_bytes(A, t) : 0.0);
  // A mixture of experts: the routing weights' gradient [N, K] fp32, all-reduced in the backward.
  const double moe = c.holds_experts() ? all_reduce_bytes(N * c.shape.experts_per_token * 4, t) : 0.0;
  const double per_layer = forward + backward + moe + (c.recompute == Recompute::full ? forward : 0.0);
  double per_micro_batch = layers * per_layer;
  if (first) per_micro_batch += sp ? 2 * all_gather_bytes(A, t) : all_reduce_bytes(A, t);  // embedding g
  if (last)
    per_micro_batch += (sp ? 3 * all_gather_bytes(A, t) : all_reduce_bytes(A, t))  // logits' f
                       + 3 * all_reduce_bytes(N * 4, t);                          // cross-entropy
  out.tensor = M * per_micro_batch;

  // Pipeline: activations forward, their gradients backward, once per chunk (v of them; the
  // first virtual stage receives no activation, the last no gradient); half of a link's bytes
  // are this rank's.
  const int v = c.virtual_stages;
  out.pipeline = pipeline_link_bytes(c) / 2 * ((last ? v - 1 : v) + (first ? v - 1 : v));

  // Context parallel: ring attention's blocks, every layer of the stage, every micro-batch.
  out.context = M * layers * context_layer_bytes(c);

  // Expert parallel: the all-to-alls, every layer of the stage, every micro-batch.
  out.expert = M * layers * expert_layer_bytes(c);

  // Data parallel (over data x context), once per step; the experts' gradients over the
  // expert-data group.
  // With sharded gradients (ZeRO-2) every micro-batch reduce-scatters the pooled buckets. With
  // sharded parameters (ZeRO-3) those buckets' weights are all-gathered before every micro-batch's
  // forward of their module and again before its backward (reshard_after_forward; not the
  // embedding's, whose backward reads no weights), instead of once after the step.
  double pooled = 0, pooled_experts = 0, gathers = 0, expert_gathers = 0;
  if (c.shard_gradients || c.shard_parameters) {
    const std::vector<model::BucketExtent> buckets = stage_buckets(m, P, c.virtual_stages, stage);
    const int embedding_step = buckets.empty() ? 0 : buckets.back().step;  // the embedding's bucket is the last
    for (model::BucketExtent b : buckets) {
      b.shards = int(b.expert ? c.expert_data_context() : c.shard_ranks());
      if (!b.pooled(true)) continue;
      const double n = double(b.elements) * double(b.count);
      (b.expert ? pooled_experts : pooled) += n;
      if (!c.shard_parameters) continue;
      const bool regathered = c.reshard_after_forward && !(stage == 0 && b.step == embedding_step);
      (b.expert ? expert_gathers : gathers) += M * n * (regathered ? 2 : 1);
    }
  }
  const auto gradients = [&](double n, double every_micro_batch, double gathered, std::int64_t d) {
    return c.distributed_optimizer ? all_gather_bytes((n + (M - 1) * every_micro_batch) * 4, d) +
                                         all_gather_bytes((n - (c.shard_parameters ? every_micro_batch : 0) + gathered) * e, d)
                                   : all_reduce_bytes(n * 4, d);
  };
  const double dense = double(stage_parameters) - double(expert_parameters);
  out.data = gradients(dense, pooled, gathers, c.shard_ranks());
  // Hybrid sharding: each rank's fp32 gradient shard summed across the replica groups once a step.
  if (c.distributed_optimizer && c.shard_replicas() > 1)
    out.data_replicas = all_reduce_bytes(dense / double(c.shard_ranks()) * 4, c.shard_replicas());
  out.expert_data = gradients(double(expert_parameters), pooled_experts, expert_gathers, c.expert_data_context());

  // The tied word embedding's two copies sum their gradients; an untied lm_head has none to share.
  if (P > 1 && (first || last) && m.tie_embeddings)
    out.embedding = all_reduce_bytes(double(m.local_vocab()) * m.hidden * 4, 2);
  return out;
}

StepCommunication busiest_communication(const Config& c, const StageParameters& stage_parameters) {
  StepCommunication most;
  for (const int p : {0, std::min(1, c.pipeline - 1), c.pipeline - 1}) {
    const StepCommunication s = stage_communication(c, p, stage_parameters.of(p), stage_parameters.experts_of(p));
    most.tensor = std::max(most.tensor, s.tensor);
    most.pipeline = std::max(most.pipeline, s.pipeline);
    most.data = std::max(most.data, s.data);
    most.data_replicas = std::max(most.data_replicas, s.data_replicas);
    most.context = std::max(most.context, s.context);
    most.embedding = std::max(most.embedding, s.embedding);
    most.expert = std::max(most.expert, s.expert);
    most.expert_data = std::max(most.expert_data, s.expert_data);
  }
  return most;
}

}  // namespace tptrain::plan
