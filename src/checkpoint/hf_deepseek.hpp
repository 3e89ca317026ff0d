// tptrain's deepseek_v3 block as Hugging Face's DeepseekV3ForCausalLM (docs/checkpoints.md,
// "DeepSeek-V3"): its config.json (file format: io/hf_deepseek_config.hpp) and the one place its
// tensors differ from the checkpoint's beyond their names, the rotary rows' order. Which checkpoint
// rows are which HF tensor is the rows' own (model::ParameterRow::hf, family "deepseek").
//
// The two models compute the same function: pre-RMSNorm blocks (ε = model.norm_eps /
// rms_norm_eps); multi-head latent attention (DeepseekV3Attention: q_a_proj, q_a_layernorm,
// q_b_proj or q_proj; kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj; o_proj) with rotary positions
// on the last qk_rope_head_dim features of each query head and on the key's shared rotary part,
// scores scaled by 1/√(qk_nope_head_dim + qk_rope_head_dim) and, with YaRN's mscale_all_dim, by
// m(factor, mscale_all_dim)²; the first model.moe_dense_layers / first_k_dense_replace blocks a
// dense SwiGLU of intermediate_size, the others DeepseekV3MoE: sigmoid scores of the router
// (mlp.gate), the expert bias (e_score_correction_bias) added for choosing only, the experts in
// n_group groups of which the topk_group with the highest sum of their two best biased scores
// compete, the top num_experts_per_tok chosen, weighted by their unbiased scores (renormalised
// with norm_topk_prob) times routed_scaling_factor, plus the shared experts' SwiGLU; a final
// RMSNorm; lm_head untied unless model.tie_embeddings.
//
// Rotary order: tptrain pairs feature i of the rotary part with i + d_R/2 (rotate-half), DeepSeek's
// checkpoints pair 2i with 2i + 1 and Hugging Face reorders them before its rotate-half
// (rope_interleave, DeepseekV3Config's default true). Export writes DeepSeek's order with
// rope_interleave true, which every transformers version with DeepSeek-V3 and DeepSeek's own code
// read alike; import takes either, as rope_interleave says. The rows concerned are the queries'
// (q_b_proj or q_proj: in each head of qk_nope_head_dim + qk_rope_head_dim rows, the last
// qk_rope_head_dim) and the shared rotary key's (kv_a_proj_with_mqa: the last qk_rope_head_dim
// rows, after kv_lora_rank).
#pragma once

#include <string>
#include <vector>

#include "src/checkpoint/hf_decoder.hpp"
#include "src/checkpoint/hf_presets.hpp"
#include "src/checkpoint/hf_tensors.hpp"
#include "src/model/spec/gpt_shape.hpp"

namespace tptrain::checkpoint {

// The preset's config.json for `shape` (DeepseekV3Config's fields, keys sorted): the sizes,
// q_lora_rank null for model.q_lora_rank = 0, the mixture's routing (scoring_func "sigmoid",
// topk_method "noaux_tc"), num_key_value_heads = the heads, num_nextn_predict_layers 0,
// rope_interleave true, and the fields every decoder family shares (rope_scaling,
// max_position_embeddings, ...) as hf_decoder.hpp writes them. A model DeepseekV3ForCausalLM does
// not compute is refused naming the deck's key: a softmax router (HF's scores with a sigmoid), a
// model.norm_eps other than 1e-6 (HF's latent norms use 1e-6 whatever rms_norm_eps says).
std::string hf_deepseek_config(const model::GptShape& shape, const HfPreset& preset);

// What import needs from a config.json, checked to describe a model tptrain computes exactly;
// the fields every decoder family shares are HfDecoderConfig's.
struct HfDeepseekConfig : HfDecoderConfig {
  int q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;  // 0: null
  int experts = 0, experts_per_token = 0, expert_ffn = 0, shared_experts = 0, dense_layers = 0, groups = 0,
      groups_per_token = 0;
  bool norm_topk_prob = true;
  double routed_scaling = 1.0;
  // The multi-token prediction modules the file holds after the blocks (model.layers.<layers> ...),
  // which tptrain does not have: import skips their tensors.
  int prediction_layers = 0;
  bool rope_interleave = true;  // the rotary rows in DeepSeek's adjacent-pair order
};
// Reads and checks `path`: the shared fields as hf_decoder.hpp reads them (model_type deepseek_v3,
// the sizes given, hidden_act silu, rope_scaling), the MLA and mixture sizes given (q_lora_rank
// null or a size), no attention bias, rms_norm_eps 1e-6 (above), scoring_func "sigmoid" and topk_method "noaux_tc" (DeepSeek-V3's router; DeepSeek-V2's
// softmax and greedy methods are refused by name), a mixture in every block after
// first_k_dense_replace (moe_layer_freq 1), num_experts_per_tok <= n_routed_experts,
// num_key_value_heads null or the heads, head_dim and qk_head_dim (when given) the rotary and
// whole query head widths, and a quantization_config
// (when given) of fp8 e4m3 weights in 128 x 128 blocks, the layout the safetensors reader
// dequantises. Throws std::runtime_error naming the file and the field.
HfDeepseekConfig read_hf_deepseek_config(const std::string& path, const HfPreset& preset);

// The deck's keys against the config's fields: "" if they agree, else one line per difference,
// naming both ("config.json n_group = 4, the deck's model.moe_groups = 2").
std::string hf_config_mismatch(const HfDeepseekConfig& config, const model::GptShape& shape);

// Marks the tensors whose rows DeepSeek's checkpoints hold in adjacent-pair rotary order (HfTensor::interleaved).
void interleave_rotary_rows(std::vector<HfTensor>& tensors, const model::GptShape& shape);

// The deck keys and config fields a checkpoint tensor's shape comes from, for messages.
std::string deepseek_shape_keys(const std::string& checkpoint_name);

}  // namespace tptrain::checkpoint
