// Model FLOPs of a training step: what MFU divides by (Chowdhery et al. 2022, PaLM appendix B;
// Narayanan et al. 2021, Megatron-LM section 5.1). Per token, without recomputation:
//   6·N + 12·L·S·H     (multi-head latent attention: 6·N + 6·L·S·nh·(d_q + d_v))
// N: every logical parameter that takes part in a matrix product, by the usual convention with the
// biases and norm weights: all of them but the position embedding and, when the output layer is
// untied (llama's default), the word embedding, both lookups. The tied word embedding counts once,
// through the logits GEMM; an untied lm_head/weight is that GEMM. 6 = 2 (multiply-add) x 3
// (forward, input gradient, weight gradient). For llama N holds SwiGLU's three matrices (3·H·F per
// block) and grouped-query attention's narrower K and V (H·nkv·d each). 12·L·S·H: the two
// attention products QKᵀ and P·V, 2·S·H FLOPs each per token and layer in the forward (nh·d = H
// query features; grouped-query attention shares K and V between heads, not the products), times
// 3. The full S x S square is counted, as the GEMMs compute it (causality masks half of it
// afterwards).
// A mixture of experts (model.mlp = "moe"): a token runs through K = experts_per_token of the E
// experts, so N holds K experts' matrices per block (its active parameters) and the router's
// [E, H] (its logits x·Wrᵀ are a GEMM, in fp32); the other E − K experts do no work for it. Under
// expert parallelism a rank runs, at balanced load, N·K rows of its own tokens' worth through its
// experts: the FLOPs per token do not depend on parallel.expert.
// Recomputation is not in the model FLOPs (MFU) but in the hardware FLOPs (HFU, Korthikanti et
// al. 2022 section 6.3): a forward run again adds 2·N_stage + 4·L_stage·S·H per token on that
// stage, and every block backward without kept scores (recompute = selective and full) first
// recomputes Q Kᵀ: 2·S·H per token and block.
#pragma once

#include <algorithm>

#include <cstdint>
#include <string>

#include "src/model/gpt_model.hpp"

namespace tptrain::model {

inline constexpr const char* kModelFlopsFormula =
    "6*N + 12*L*S*H per token (N without the position embedding, and without the word embedding when untied; "
    "with a mixture of experts the router and K of the E experts per block)";

// Whether a block's parameter (a row name, or a tensor's "layers/<i>/<row>") belongs to an expert
// a token does not run: experts K .. E − 1 of a mixture (all experts are alike, so counting the
// first K counts K experts' work).
inline bool inactive_expert(const model::GptShape& s, const std::string& name) {
  std::string row = name;
  if (row.rfind("layers/", 0) == 0) {
    const std::size_t slash = row.find('/', 7);
    if (slash != std::string::npos) row = row.substr(slash + 1);
  }
  return model::expert_of_row(row) >= s.experts_per_token;
}

// N above: the logical tensors of the model (the checkpoint's), without the lookups and, with a
// mixture of experts, without the experts beyond K in each block (its active parameters).
inline double flops_parameters(const model::GptShape& s) {
  double n = 0;
  for (const model::LogicalTensor& t : model::logical_tensors(s)) {
    if (t.name == "embedding/position" || (t.name == "embedding/word" && !s.tie_embeddings)) continue;
    if (inactive_expert(s, t.name)) continue;
    double size = 1;
    for (const std::int64_t d : t.shape) size *= static_cast<double>(d);
    n += size;
  }
  return n;
}

// The two attention products of a block's forward per token, over the full S×S square: Q Kᵀ over
// the heads' query/key features and P V over their value features, 2·S·nh·(d_q + d_v) = 4·S·H but
// in multi-head latent attention (d_q = d_nope + d_R, d_v: its own head widths).
inline double attention_products_flops_per_token(const model::GptShape& s) {
  return 2.0 * double(s.seq_length) * s.heads * (double(s.qk_head_dim()) + s.value_head_dim());
}

inline double training_flops_per_token(const model::GptShape& s) {
  return 6.0 * flops_parameters(s) + 3.0 * s.layers * attention_products_flops_per_token(s);
}

// One transformer block's forward per token: its GEMMs, 2 FLOPs per weight element of the
// specification's matrices (the block descriptor's two-dimensional rows), and the two attention
// products over the full S×S square, 4·S·H. GPT-2: QKV 3H², projection H², MLP 2HF; Llama: Q H²,
// K and V H·nkv·d each, o_proj H², gate, up and down 3HF (tests/train/test_model_flops.cpp holds
// them to these published formulas); a mixture of experts: the router E·H and K experts' 3HF. The
// one formula of a block's cost, for the bench and src/plan.
// Counted from the table's rows, an expert's K times (block_parameter_kinds): its time does not
// grow with model.experts.
inline double block_forward_flops_per_token(const model::GptShape& s) {
  const double routed = std::min(s.experts_per_token, s.experts);  // per_expert rows: a mixture's
  double weights = 0;
  for (const model::ParameterRow& r : model::block_parameter_kinds(s))
    if (r.shape[1] != model::ParameterDim::none)
      weights += (r.per_expert ? routed : 1.0) * static_cast<double>(model::extent(r.shape[0], s)) *
                 static_cast<double>(model::extent(r.shape[1], s));
  return 2.0 * weights + attention_products_flops_per_token(s);
}

// One forward of `layers` blocks (and, on the stages that have them, the head), per token: the
// cost of recomputing a stage's forward before its backward.
inline double forward_flops_per_token(const model::GptShape& s, int layers, bool with_head) {
  return layers * block_forward_flops_per_token(s) + (with_head ? 2.0 * double(s.vocab_size) * s.hidden : 0.0);
}

// Q Kᵀ again, per token, for a block's backward that did not keep the scores (the full S×S
// square, as training_flops_per_token counts it).
inline double recomputed_scores_flops_per_token(const model::GptShape& s) {
  return 2.0 * double(s.seq_length) * s.heads * s.qk_head_dim();
}

// The scores flash attention visits for `length` queries against as many keys: causally (below), or
// `whole` (a chunk pair of ring attention wholly before its queries).
struct FlashVisits {
  double forward = 0, backward = 0;  // scores visited
};
inline FlashVisits flash_visits(double length, bool whole) {
  if (whole) return {length * length, length * length};
  constexpr double block = 256;  // kernels::flash_query_rows, kernels::flash_backward_key_rows
  FlashVisits v;
  for (double r0 = 0; r0 < length; r0 += block) {
    const double rows = std::min(block, length - r0);
    v.forward += rows * (r0 + rows);
    v.backward += rows * (length - r0);
  }
  return v;
}

// The attention core's FLOPs for one sequence, one layer and the heads of a tensor rank, forward
// and backward, as the core executes them (the model FLOPs count the full S×S square: 12·S²·H per
// sequence and layer). Flash (kokkos_kernels/flash_attention.hpp) visits in the forward, for each
// query block of 256 rows, the keys up to its last row, and in the backward, for each key block of
// 256 keys, the query rows from its first on: 2·d FLOPs per visited score for each of Q Kᵀ and P V
// forward, and Q Kᵀ, dO Vᵀ, dS K, dSᵀ Q, Pᵀ dO backward. The batched core computes the full
// square: Q Kᵀ, P V forward; dO Vᵀ, dS K, dSᵀ Q, Pᵀ dO backward, and Q Kᵀ again unless recompute
// = none kept the scores (10 or 12·d). d: a head's width; multi-head latent attention's products
// over its query/key features d_q and its value features d_v (flash: 2d_q + 2d_v forward,
// 6d_q + 4d_v backward; batched: d taken as their mean).
inline double attention_flops_per_sequence(const model::GptShape& s, bool scores_kept) {
  const double dq = s.qk_head_dim(), dv = s.value_head_dim(), heads = s.local_heads(), S = s.seq_length;
  if (!s.flash_attention) return (scores_kept ? 10.0 : 12.0) * 0.5 * (dq + dv) * S * S * heads;
  const FlashVisits v = flash_visits(S, false);
  return ((2.0 * dq + 2.0 * dv) * v.forward + (6.0 * dq + 4.0 * dv) * v.backward) * heads;
}

// Ring attention's flash FLOPs on one context rank, for one sequence of its heads
// (src/model/ring_attention.hpp): C steps over chunk pairs of c = S/(2C) queries and keys, the
// first (the rank's own block) two causal diagonals and one whole pair, each later step two whole
// pairs; masked pairs are skipped. One call of the flash kernels per pair.
struct RingStepFlops {
  double first_forward = 0, first_backward = 0;  // the first step's
  double later_forward = 0, later_backward = 0;  // each later step's
  double chunk = 0;                              // c
  int steps = 1;                                 // C
  // Forward and backward of all C steps.
  double total() const { return first_forward + first_backward + (steps - 1) * (later_forward + later_backward); }
};
inline RingStepFlops ring_attention_step_flops(const model::GptShape& s) {
  const double dq = s.qk_head_dim(), dv = s.value_head_dim(), heads = s.local_heads();
  RingStepFlops r;
  r.steps = s.context;
  r.chunk = double(s.seq_length) / (2.0 * s.context);
  const FlashVisits diagonal = flash_visits(r.chunk, false), whole = flash_visits(r.chunk, true);
  const double forward = (2.0 * dq + 2.0 * dv) * heads, backward = (6.0 * dq + 4.0 * dv) * heads;
  r.first_forward = forward * (2.0 * diagonal.forward + whole.forward);
  r.first_backward = backward * (2.0 * diagonal.backward + whole.backward);
  r.later_forward = forward * 2.0 * whole.forward;
  r.later_backward = backward * 2.0 * whole.backward;
  return r;
}

// What one rank's model recomputed in a step (GptModel's recomputed_* counters, per step).
struct Recomputed {
  double blocks = 0;  // block forwards run again (recompute = full)
  double heads = 0;   // heads (ln_f, logits, loss) run again on a last stage
  double scores = 0;  // block backwards that recomputed Q Kᵀ (recompute = selective or full)
};

// The hardware FLOPs beyond the model FLOPs of one rank's step, `tokens` tokens per micro-batch
// (each recomputed piece is split over the tensor-parallel ranks).
inline double recomputed_flops(const model::GptShape& s, std::int64_t tokens, const Recomputed& r) {
  return static_cast<double>(tokens) *
         (r.blocks * forward_flops_per_token(s, 1, false) + r.heads * forward_flops_per_token(s, 0, true) +
          r.scores * recomputed_scores_flops_per_token(s)) /
         s.tensor;
}

}  // namespace tptrain::model
