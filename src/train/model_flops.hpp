// Model FLOPs of a training step: what MFU divides by (Chowdhery et al. 2022, PaLM appendix B;
// Narayanan et al. 2021, Megatron-LM section 5.1). Per token, without recomputation:
//   6·N + 12·L·S·H
// N: every logical parameter but the position embedding, which takes part in no matrix product
// (the word embedding counts once, through the tied logits GEMM; biases and LayerNorm weights are
// in N by the usual convention), 6 = 2 (multiply-add) x 3 (forward, input gradient, weight
// gradient). 12·L·S·H: the two attention products QKᵀ and P·V, 2·S·H
// FLOPs each per token and layer in the forward, times 3. The full S x S square is counted,
// as the GEMMs compute it (causality masks half of it afterwards). A forward run again for
// recomputation adds 2·N_stage + 4·L_stage·S·H per token on that stage.
#pragma once

#include <cstdint>

#include "src/model/gpt_model.hpp"

namespace tptrain::train {

inline constexpr const char* kModelFlopsFormula = "6*N + 12*L*S*H per token (N without the position embedding)";

// N above: the logical tensors of the model (the checkpoint's), without embedding/position.
inline double flops_parameters(const model::GptShape& s) {
  double n = 0;
  for (const model::LogicalTensor& t : model::logical_tensors(s)) {
    if (t.name == "embedding/position") continue;
    double size = 1;
    for (const std::int64_t d : t.shape) size *= static_cast<double>(d);
    n += size;
  }
  return n;
}

inline double training_flops_per_token(const model::GptShape& s) {
  return 6.0 * flops_parameters(s) + 12.0 * s.layers * double(s.seq_length) * s.hidden;
}

// One transformer block's forward per token, sequence length S: the QKV, projection and MLP GEMMs
// 2·(4H² + 2HF) and the two attention products over the full S×S square 4·S·H. The one formula
// of a block's cost, for the bench and for src/plan.
inline double block_forward_flops_per_token(double S, double H, double F) {
  return 2.0 * (4 * H * H + 2 * H * F) + 4.0 * S * H;
}

// One forward of `layers` blocks (and, on the stages that have them, the head), per token: the
// cost of recomputing a stage's forward before its backward.
inline double forward_flops_per_token(const model::GptShape& s, int layers, bool with_head) {
  const double H = s.hidden;
  return layers * block_forward_flops_per_token(s.seq_length, H, s.ffn_hidden) +
         (with_head ? 2.0 * double(s.vocab_size) * H : 0.0);
}

}  // namespace tptrain::train
