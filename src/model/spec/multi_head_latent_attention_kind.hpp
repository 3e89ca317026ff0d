// Multi-head latent attention (model.attention = "mla"; DeepSeek-V2 §2.1, DeepSeek-V3 §2.1.1;
// Hugging Face's DeepseekV3Attention): the keys and values of every head decompressed from one
// latent c_KV of r_kv features per token (model.kv_lora_rank), the queries from a latent c_Q of r_q
// (model.q_lora_rank; 0: one projection), each through an RMSNorm. A head's query and key have
// d_q = d_nope + d_R features (model.qk_nope_head_dim, model.qk_rope_head_dim): d_nope from the
// latents, d_R rotated — the key's d_R shared by all heads, projected with c_KV — and its value
// d_v (model.v_head_dim). Its rows at the block's attention place ("attn"); its forward and
// backward: src/model/multi_head_latent_attention.hpp.
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/model/spec/sublayer_kind.hpp"
#include "src/model/spec/yarn_rope_kind.hpp"

namespace tptrain::model {

// Tensor parallelism over heads, as Megatron-Core's MLASelfAttention: the down-projections and
// their norms replicated (each rank computes the latents of its rows; with sequence parallelism
// each rank its own tokens, the gradients summed over the group as the block's norms'), the
// up-projections column-parallel with whole heads per rank (a head's rows are consecutive:
// d_nope + d_R of q_up, d_nope + d_v of kv_up), the output projection row-parallel.
#define TPTRAIN_NO_BLOCKS {ParameterDim::none, ParameterDim::none, ParameterDim::none}
inline constexpr ParameterRow kLatentAttentionParameters[] = {
    // name, shape, split, blocks, SP sum, decay, init, tied, block extents, needs, Hugging Face names
    {"{place}/q_down/weight", {ParameterDim::q_lora, ParameterDim::hidden}, TensorSplit::replicated, 1, true, true,
     {Init::normal, 0.02f}, false, TPTRAIN_NO_BLOCKS, needs_q_lora, "deepseek=model.layers.{i}.self_attn.q_a_proj.weight"},
    {"{place}/q_norm/weight", {ParameterDim::q_lora, ParameterDim::none}, TensorSplit::replicated, 1, true, false,
     {Init::constant, 1.0f}, false, TPTRAIN_NO_BLOCKS, needs_q_lora,
     "deepseek=model.layers.{i}.self_attn.q_a_layernorm.weight"},
    {"{place}/q_up/weight", {ParameterDim::mla_q, ParameterDim::q_lora}, TensorSplit::column, 1, false, true,
     {Init::normal, 0.02f}, false, TPTRAIN_NO_BLOCKS, needs_q_lora, "deepseek=model.layers.{i}.self_attn.q_b_proj.weight"},
    {"{place}/q/weight", {ParameterDim::mla_q, ParameterDim::hidden}, TensorSplit::column, 1, false, true,
     {Init::normal, 0.02f}, false, TPTRAIN_NO_BLOCKS, needs_direct_q, "deepseek=model.layers.{i}.self_attn.q_proj.weight"},
    {"{place}/kv_down/weight", {ParameterDim::kv_latent, ParameterDim::hidden}, TensorSplit::replicated, 1, true, true,
     {Init::normal, 0.02f}, false, TPTRAIN_NO_BLOCKS, always,
     "deepseek=model.layers.{i}.self_attn.kv_a_proj_with_mqa.weight"},
    {"{place}/kv_norm/weight", {ParameterDim::kv_lora, ParameterDim::none}, TensorSplit::replicated, 1, true, false,
     {Init::constant, 1.0f}, false, TPTRAIN_NO_BLOCKS, always, "deepseek=model.layers.{i}.self_attn.kv_a_layernorm.weight"},
    {"{place}/kv_up/weight", {ParameterDim::mla_kv, ParameterDim::kv_lora}, TensorSplit::column, 1, false, true,
     {Init::normal, 0.02f}, false, TPTRAIN_NO_BLOCKS, always, "deepseek=model.layers.{i}.self_attn.kv_b_proj.weight"},
    {"{place}/proj/weight", {ParameterDim::hidden, ParameterDim::mla_o}, TensorSplit::row, 1, false, true,
     {Init::residual_normal, 0.02f}, false, TPTRAIN_NO_BLOCKS, always, "deepseek=model.layers.{i}.self_attn.o_proj.weight"},
};
#undef TPTRAIN_NO_BLOCKS

// The latents are the block's rows (n: the rank's tokens with sequence parallelism); what the
// up-projections read is all N tokens, gathered (sequence parallelism) into scratch. The core
// reads Q, K and V packed as grouped-query attention's with nkv = nh and value heads of d_v
// (kokkos_kernels/flash_attention.hpp).
inline constexpr BufferRow kLatentAttentionBuffers[] = {
    {"/{place}.q_down", "MLA: the queries' latent before its norm", {BufferDim::residual_rows, BufferDim::q_lora},
     Element::storage, Lifetime::saved, false, needs_q_lora},
    {"/{place}.q_latent", "MLA: the queries' latent c_Q", {BufferDim::residual_rows, BufferDim::q_lora},
     Element::storage, Lifetime::saved, false, needs_q_lora},
    {"/{place}.q_norm.rstd", "MLA: 1/rms of each row of the queries' latent", {BufferDim::residual_rows},
     Element::fp32, Lifetime::saved, false, needs_q_lora},
    {"/{place}.kv_down", "MLA: the keys' and values' latent before its norm, and the rotary key",
     {BufferDim::residual_rows, BufferDim::kv_latent}, Element::storage, Lifetime::saved},
    {"/{place}.kv_latent", "MLA: the latent c_KV and the rotary key", {BufferDim::residual_rows, BufferDim::kv_latent},
     Element::storage, Lifetime::saved},
    {"/{place}.kv_norm.rstd", "MLA: 1/rms of each row of c_KV", {BufferDim::residual_rows}, Element::fp32,
     Lifetime::saved},
    {"/{place}.qkv_out", "MLA: Q, K and V of the rank's heads (q and the rotary key rotated)",
     {BufferDim::tokens, BufferDim::mla_qkv_t}, Element::storage, Lifetime::saved},
    {"/{place}.lse", "attention log Σ exp per score row", {BufferDim::token_heads_t}, Element::fp32, Lifetime::saved},
    {"/{place}.scores", "attention scores Q Kᵀ (batched core)",
     {BufferDim::b, BufferDim::a_t, BufferDim::local_seq, BufferDim::local_seq}, Element::storage, Lifetime::saved_if_none,
     false, needs_batched},
    {"/{place}.ctx", "attention context", {BufferDim::tokens, BufferDim::mla_o_t}, Element::storage, Lifetime::saved},
    {"attention.q_latent_all", "MLA: every token's c_Q, gathered", {BufferDim::tokens, BufferDim::q_lora},
     Element::storage, Lifetime::scratch, false, needs_q_lora | needs_split_sequence, ScratchPhase::attention},
    {"attention.kv_latent_all", "MLA: every token's c_KV and rotary key, gathered",
     {BufferDim::tokens, BufferDim::kv_latent}, Element::storage, Lifetime::scratch, false, needs_split_sequence,
     ScratchPhase::attention},
    {"attention.kv_up", "MLA: the heads' keys and values from c_KV, then their gradient",
     {BufferDim::tokens, BufferDim::mla_kv_t}, Element::storage, Lifetime::scratch, false, always,
     ScratchPhase::attention},
    {"attention.d_ctx", "attention context gradient", {BufferDim::tokens, BufferDim::mla_o_t}, Element::storage,
     Lifetime::scratch, false, always, ScratchPhase::attention},
    {"attention.d_qkv", "QKV gradient", {BufferDim::tokens, BufferDim::mla_qkv_t}, Element::storage, Lifetime::scratch,
     false, always, ScratchPhase::attention},
    {"attention.d_q_latent_all", "MLA: c_Q's gradient, this rank's heads' part", {BufferDim::tokens, BufferDim::q_lora},
     Element::storage, Lifetime::scratch, false, needs_q_lora, ScratchPhase::attention},
    {"attention.d_kv_latent_all", "MLA: c_KV's and the rotary key's gradient, this rank's heads' part",
     {BufferDim::tokens, BufferDim::kv_latent}, Element::storage, Lifetime::scratch, false, always,
     ScratchPhase::attention},
    {"attention.d_q_latent", "MLA: c_Q's gradient, summed over the group (the rank's tokens)",
     {BufferDim::residual_rows, BufferDim::q_lora}, Element::storage, Lifetime::scratch, false,
     needs_q_lora | needs_split_sequence, ScratchPhase::attention},
    {"attention.d_kv_latent", "MLA: c_KV's gradient, summed over the group (the rank's tokens)",
     {BufferDim::residual_rows, BufferDim::kv_latent}, Element::storage, Lifetime::scratch, false, needs_split_sequence,
     ScratchPhase::attention},
    {"attention.d_q_down", "MLA: the queries' down-projection's output gradient",
     {BufferDim::residual_rows, BufferDim::q_lora}, Element::storage, Lifetime::scratch, false, needs_q_lora,
     ScratchPhase::attention},
    {"attention.d_kv_down", "MLA: the keys' down-projection's output gradient",
     {BufferDim::residual_rows, BufferDim::kv_latent}, Element::storage, Lifetime::scratch, false, always,
     ScratchPhase::attention},
    {"attention.probs", "attention probabilities (the batched core's softmax buffer)",
     {BufferDim::b, BufferDim::a_t, BufferDim::local_seq, BufferDim::local_seq}, Element::storage, Lifetime::scratch, false,
     needs_batched, ScratchPhase::attention},
    {"attention.dprobs_tile", "attention probabilities' gradient, one row tile (batched core)",
     {BufferDim::b, BufferDim::a_t, BufferDim::tile, BufferDim::local_seq}, Element::storage, Lifetime::scratch, false,
     needs_batched, ScratchPhase::attention},
    {"attention.dq_sum", "dQ summed over the key blocks (flash)", {BufferDim::tokens, BufferDim::mla_q_t},
     Element::fp32, Lifetime::scratch, false, needs_flash, ScratchPhase::attention},
    {"attention.delta", "D = Σ dO ∘ O per score row (flash)", {BufferDim::token_heads_t}, Element::fp32,
     Lifetime::scratch, false, needs_flash, ScratchPhase::attention},
    {"attention.dkv_sum", "dK and dV summed over the row tiles (batched core)", {BufferDim::tokens, BufferDim::mla_kv2_t},
     Element::fp32, Lifetime::scratch, true, needs_batched, ScratchPhase::attention},
    {"ring.kv_0", "ring attention: K and V of the block held", {BufferDim::tokens, BufferDim::mla_kv2_t},
     Element::storage, Lifetime::scratch, false, needs_context, ScratchPhase::attention},
    {"ring.kv_1", "ring attention: K and V of the block arriving", {BufferDim::tokens, BufferDim::mla_kv2_t},
     Element::storage, Lifetime::scratch, false, needs_context, ScratchPhase::attention},
    {"ring.o_sum", "ring attention: the output merged over the blocks", {BufferDim::tokens, BufferDim::mla_o_t},
     Element::fp32, Lifetime::scratch, false, needs_context, ScratchPhase::attention},
    {"ring.dkv_0", "ring attention: a block's dK and dV sums", {BufferDim::tokens, BufferDim::mla_kv2_t}, Element::fp32,
     Lifetime::scratch, false, needs_context, ScratchPhase::attention},
    {"ring.dkv_1", "ring attention: the previous block's sums, while sent", {BufferDim::tokens, BufferDim::mla_kv2_t},
     Element::fp32, Lifetime::scratch, false, needs_context, ScratchPhase::attention},
    {"ring.dkv_in", "ring attention: the sums arriving", {BufferDim::tokens, BufferDim::mla_kv2_t}, Element::fp32,
     Lifetime::scratch, false, needs_context, ScratchPhase::attention},
};

inline constexpr const char* kLatentAttentionLeftOut = "it is multi-head latent attention's (model.attention = \"mla\")";
inline constexpr KindKey kLatentAttentionKeys[] = {
    {"model", "q_lora_rank", 1536, 0, true, "(0 = one query projection)",
     "MLA: the queries' latent r_q (DeepSeek-V3: 1536; V2-Lite: 0)", kLatentAttentionLeftOut,
     &ModelShape::q_lora_rank},
    {"model", "kv_lora_rank", 512, 1, true, "", "MLA: the keys' and values' latent r_kv, cached in generation (512)",
     kLatentAttentionLeftOut, &ModelShape::kv_lora_rank},
    {"model", "qk_nope_head_dim", 128, 1, true, "", "MLA: a head's query and key features without positions (128)",
     kLatentAttentionLeftOut, &ModelShape::qk_nope_head_dim},
    {"model", "qk_rope_head_dim", 64, 2, true, "",
     "MLA: a head's rotated query and key features, the key's shared by the heads (64)", kLatentAttentionLeftOut,
     &ModelShape::qk_rope_head_dim},
    {"model", "v_head_dim", 128, 1, true, "", "MLA: a head's value features (128)", kLatentAttentionLeftOut,
     &ModelShape::v_head_dim},
};

// Its rules: rotary positions (the decoupled key is rotary's), rotated in pairs, and every head
// its own keys and values (model.kv_heads is grouped-query attention's).
inline std::vector<rules::Problem> latent_attention_problems(const ModelShape& s) {
  std::vector<rules::Problem> out;
  if (s.position == "learned")
    out.push_back(rules::Problem::statement(
        {"model.position", 0, "\"learned\""},
        "rotary positions with {model.attention}: its keys' decoupled part d_R is rotated",
        {{"model.attention", 0, "\"mla\""}}));
  if (s.qk_rope_head_dim % 2 != 0)
    out.push_back(rules::Problem::statement({"model.qk_rope_head_dim", s.qk_rope_head_dim},
                                            "an even size: rotary embeddings rotate pairs of features"));
  if (s.kv_heads != 0 && s.kv_heads != s.heads)
    out.push_back(rules::Problem::statement(
        {"model.kv_heads", s.kv_heads},
        fmt::format("0 or model.heads = {} with {{model.attention}}: every head has its own key and value", s.heads),
        {{"model.attention", 0, "\"mla\""}}));
  return out;
}
inline constexpr const char* kLatentAttentionBinds[] = {"heads", "position", "kv_heads"};

// The latent norms' ε: DeepSeek's RMSNorm default, whatever the block norms' (Hugging Face's
// DeepseekV3Attention builds q_a_layernorm and kv_a_layernorm without rms_norm_eps; DeepSeek's own
// inference code too).
inline constexpr double kLatentNormEpsilon = 1e-6;

// The softmax scale's factor beyond 1/√d_q: YaRN's m(s, mscale_all_dim)² (DeepSeek-V3's
// attention; yarn_rope_kind.hpp), 1 otherwise.
inline double latent_attention_softmax_factor(const ModelShape& s) {
  if (s.position != "yarn" || s.rope_mscale_all_dim <= 0) return 1.0;
  const double m = yarn_magnitude(s.rope_factor, s.rope_mscale_all_dim);
  return m * m;
}

inline constexpr SublayerKind kLatentAttention{
    SublayerSlot::attention,
    "mla",
    "multi-head latent attention: keys and values from a latent of model.kv_lora_rank the heads share, "
    "queries through one of model.q_lora_rank (DeepSeek-V2/V3)",
    kLatentAttentionParameters,
    kLatentAttentionBuffers,
    nullptr,
    kLatentAttentionKeys,
    latent_attention_problems,
    kLatentAttentionBinds,
    [](const ModelShape& s) {
      return fmt::format("multi-head latent attention (r_q {}, r_kv {}, d_nope {}, d_R {}, d_v {})", s.q_lora_rank,
                         s.kv_lora_rank, s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim);
    }};

}  // namespace tptrain::model
