// Grouped-query attention (model.attention = "gqa"; Ainslie et al. 2023; multi-head attention,
// Vaswani et al. 2017, when model.kv_heads = model.heads): Megatron's ParallelAttention, QKV
// column-parallel with whole heads per rank, the attention core over the rank's heads, the output
// projection row-parallel. Its rows at the block's attention place ("attn"); its forward and
// backward: src/model/parallel_attention.hpp.
#pragma once

#include <string>

#include "src/model/spec/sublayer_kind.hpp"

namespace tptrain::model {

// {place}/qkv stacks [Q: nh·d | K: nkv·d | V: nkv·d], each block split over the tensor ranks (a
// rank holds Q, K and V of its heads). residual_normal: GPT-2's 1/√(2L) on the residual projection
// when the specification scales it (BlockSpec::scaled_residual_init), else σ itself.
#define TPTRAIN_QKV_BLOCKS {ParameterDim::hidden, ParameterDim::kv, ParameterDim::kv}
#define TPTRAIN_NO_BLOCKS {ParameterDim::none, ParameterDim::none, ParameterDim::none}
inline constexpr ParameterRow kGroupedQueryAttentionParameters[] = {
    // name, shape, split, blocks, SP sum, decay, init, tied, block extents, needs, Hugging Face names
    {"{place}/qkv/weight", {ParameterDim::qkv, ParameterDim::hidden}, TensorSplit::column, 3, false, true,
     {Init::normal, 0.02f}, false, TPTRAIN_QKV_BLOCKS, always,
     "gpt2^=transformer.h.{i}.attn.c_attn.weight "
     "llama=model.layers.{i}.self_attn.q_proj.weight|"
     "model.layers.{i}.self_attn.k_proj.weight|"
     "model.layers.{i}.self_attn.v_proj.weight"},
    {"{place}/qkv/bias", {ParameterDim::qkv}, TensorSplit::column, 3, false, false, {Init::constant, 0.0f}, false,
     TPTRAIN_QKV_BLOCKS, needs_qkv_bias,
     "gpt2=transformer.h.{i}.attn.c_attn.bias "
     "llama=model.layers.{i}.self_attn.q_proj.bias|"
     "model.layers.{i}.self_attn.k_proj.bias|"
     "model.layers.{i}.self_attn.v_proj.bias"},
    {"{place}/proj/weight", {ParameterDim::hidden, ParameterDim::hidden}, TensorSplit::row, 1, false, true,
     {Init::residual_normal, 0.02f}, false, TPTRAIN_NO_BLOCKS, always,
     "gpt2^=transformer.h.{i}.attn.c_proj.weight "
     "llama=model.layers.{i}.self_attn.o_proj.weight"},
    {"{place}/proj/bias", {ParameterDim::hidden}, TensorSplit::replicated, 1, true, false, {Init::constant, 0.0f}, false,
     TPTRAIN_NO_BLOCKS, needs_linear_bias,
     "gpt2=transformer.h.{i}.attn.c_proj.bias "
     "llama=model.layers.{i}.self_attn.o_proj.bias"},
};
#undef TPTRAIN_QKV_BLOCKS
#undef TPTRAIN_NO_BLOCKS

// Both attention cores (kokkos_kernels/flash_attention.hpp, attention.hpp) read the rank's nkv/t
// key/value heads in place from the QKV output; flash keeps no S×S buffer, and its block tiles live
// in Kokkos team scratch (kernels::flash_backward_scratch_elements(d) acc_t values per team, whatever
// S). Its scratch shares one region with the MLP's (ScratchPhase, phase_region_bytes).
inline constexpr BufferRow kGroupedQueryAttentionBuffers[] = {
    {"/{place}.qkv_out", "QKV output (rotary: q and k rotated)", {BufferDim::tokens, BufferDim::gqa_t}, Element::storage,
     Lifetime::saved},
    {"/{place}.lse", "attention log Σ exp per score row", {BufferDim::token_heads_t}, Element::fp32, Lifetime::saved},
    {"/{place}.scores", "attention scores Q Kᵀ (batched core)",
     {BufferDim::b, BufferDim::a_t, BufferDim::local_seq, BufferDim::local_seq}, Element::storage, Lifetime::saved_if_none, false,
     needs_batched},
    {"/{place}.ctx", "attention context", {BufferDim::tokens, BufferDim::h_t}, Element::storage, Lifetime::saved},
    {"attention.probs", "attention probabilities (the batched core's softmax buffer)",
     {BufferDim::b, BufferDim::a_t, BufferDim::local_seq, BufferDim::local_seq}, Element::storage, Lifetime::scratch, false,
     needs_batched, ScratchPhase::attention},
    {"attention.dprobs_tile", "attention probabilities' gradient, one row tile (batched core)",
     {BufferDim::b, BufferDim::a_t, BufferDim::tile, BufferDim::local_seq}, Element::storage, Lifetime::scratch, false,
     needs_batched, ScratchPhase::attention},
    {"attention.d_qkv", "QKV gradient (its Q block holds the context gradient first)", {BufferDim::tokens, BufferDim::gqa_t},
     Element::storage, Lifetime::scratch, false, always, ScratchPhase::attention},
    {"attention.dq_sum", "dQ summed over the key blocks (flash)", {BufferDim::tokens, BufferDim::h_t}, Element::fp32,
     Lifetime::scratch, false, needs_flash, ScratchPhase::attention},
    {"attention.delta", "D = Σ dO ∘ O per score row (flash)", {BufferDim::token_heads_t}, Element::fp32, Lifetime::scratch,
     false, needs_flash, ScratchPhase::attention},
    {"attention.dkv_sum", "dK and dV summed over the row tiles and the group's heads (batched core)",
     {BufferDim::tokens, BufferDim::kv2_t}, Element::fp32, Lifetime::scratch, true, needs_batched, ScratchPhase::attention},
    {"ring.kv_0", "ring attention: K and V of the block held", {BufferDim::tokens, BufferDim::kv2_t}, Element::storage,
     Lifetime::scratch, false, needs_context, ScratchPhase::attention},
    {"ring.kv_1", "ring attention: K and V of the block arriving", {BufferDim::tokens, BufferDim::kv2_t}, Element::storage,
     Lifetime::scratch, false, needs_context, ScratchPhase::attention},
    {"ring.o_sum", "ring attention: the output merged over the blocks", {BufferDim::tokens, BufferDim::h_t}, Element::fp32,
     Lifetime::scratch, false, needs_context, ScratchPhase::attention},
    {"ring.dkv_0", "ring attention: a block's dK and dV sums", {BufferDim::tokens, BufferDim::kv2_t}, Element::fp32,
     Lifetime::scratch, false, needs_context, ScratchPhase::attention},
    {"ring.dkv_1", "ring attention: the previous block's sums, while sent", {BufferDim::tokens, BufferDim::kv2_t},
     Element::fp32, Lifetime::scratch, false, needs_context, ScratchPhase::attention},
    {"ring.dkv_in", "ring attention: the sums arriving", {BufferDim::tokens, BufferDim::kv2_t}, Element::fp32,
     Lifetime::scratch, false, needs_context, ScratchPhase::attention},
};

inline constexpr SublayerKind kGroupedQueryAttention{
    SublayerSlot::attention,
    "gqa",
    "grouped-query attention: model.kv_heads key/value heads shared by the query heads (multi-head "
    "attention when kv_heads = heads)",
    kGroupedQueryAttentionParameters,
    kGroupedQueryAttentionBuffers,
    nullptr,
    {},
    nullptr,
    {},
    [](const ModelShape& s) {
      return std::string(s.kv_head_count() == s.heads ? "multi-head attention" : "grouped-query attention");
    }};

}  // namespace tptrain::model
