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
  return local_tokens(c) * 2.0 * c.shape.local_kv_heads() * c.shape.head_dim() * c.element_bytes();
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

StepCommunication stage_communication(const Config& c, int stage, std::int64_t stage_parameters) {
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
  const double per_layer = forward + backward + (c.recompute == Recompute::full ? forward : 0.0);
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

  // Data parallel (over data x context), once per step.
  const double n = double(stage_parameters);
  const std::int64_t d = c.data_context();
  out.data = c.distributed_optimizer ? all_gather_bytes(n * 4, d) + all_gather_bytes(n * e, d)
                                     : all_reduce_bytes(n * 4, d);

  // The tied word embedding's two copies sum their gradients; an untied lm_head has none to share.
  if (P > 1 && (first || last) && m.tie_embeddings)
    out.embedding = all_reduce_bytes(double(m.local_vocab()) * m.hidden * 4, 2);
  return out;
}

StepCommunication busiest_communication(const Config& c, const StageParameters& stage_parameters) {
  StepCommunication most;
  for (const int p : {0, std::min(1, c.pipeline - 1), c.pipeline - 1}) {
    const StepCommunication s = stage_communication(c, p, stage_parameters.of(p));
    most.tensor = std::max(most.tensor, s.tensor);
    most.pipeline = std::max(most.pipeline, s.pipeline);
    most.data = std::max(most.data, s.data);
    most.context = std::max(most.context, s.context);
    most.embedding = std::max(most.embedding, s.embedding);
  }
  return most;
}

}  // namespace tptrain::plan
