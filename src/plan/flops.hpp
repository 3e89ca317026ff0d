// Compute and time of a training run (docs/planning.md, "FLOPs and time"), after Narayanan et
// al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"),
// section 5.1 and appendix:
//
//   eq. 3  F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))   FLOPs per iteration, full recomputation
//   eq. 4  time ≈ 8·T·P/(n·X)  (6·T·P/(n·X) without recomputation)
//
// B global batch (sequences), s sequence length, l layers, h hidden, V vocabulary, T training
// tokens, P parameters, n GPUs, X achieved FLOP/s per GPU. Only matrix products count (2 FLOPs per
// multiply-add). The attention products count the whole s × s square, as the paper does, though
// tptrain's causal attention GEMMs compute about half of it.
#pragma once

#include "src/plan/plan_config.hpp"

namespace tptrain::plan {

// Eq. 3 as published (GPT, ffn_hidden = 4h; full recomputation: four passes over the blocks).
double narayanan_flops_per_iteration(double B, double s, double l, double h, double V);

// The terms eq. 3 is made of, for any ffn width f (forward pass, one iteration of B sequences):
// one block's GEMMs — GPT-2: QKV 6Bsh², projection 2Bsh², MLP 4Bshf; llama: Q 2Bsh², K and V
// 2Bsh·(k·d) each (k kv_heads, d head dimension), o_proj 2Bsh², gate, up and down 6Bshf — and its
// attention core 4Bs²h (QKᵀ and P·V, 2Bs²h each, the same with grouped-query attention: the
// query heads' products); the logits 2BshV (model::block_forward_flops_per_token).
double block_forward_flops(double B, const model::GptShape& shape);
double attention_core_forward_flops(double B, double s, double h);
double logits_forward_flops(double B, double s, double h, double V);

// FLOPs of one iteration (c.global_batch sequences) with recomputation `r`: forward + backward
// (twice the forward) of every block and of the logits, plus what the backward recomputes:
//   none       3·l·block + 3·logits                    (eq. 3 with 72 in place of 96 for the blocks)
//   selective  the same + l·attention core
//   full       4·l·block + 3·logits                    (eq. 3)
// V is the padded vocabulary the logits GEMM computes (src/model/spec/gpt_shape.hpp).
double flops_per_iteration(const Config& c, Recompute r);

// Eq. 4: seconds to train on `tokens` with `parameters`, on `gpus` GPUs of `flops_per_gpu`
// achieved FLOP/s each: 8·T·P/(n·X) with recomputation, 6·T·P/(n·X) without.
double narayanan_training_seconds(double tokens, double parameters, double gpus, double flops_per_gpu,
                                  bool recomputation);

// 6·N·T: the usual total of a training run (Kaplan et al. 2020), without recomputation.
double six_n_t(double parameters, double tokens);

}  // namespace tptrain::plan
