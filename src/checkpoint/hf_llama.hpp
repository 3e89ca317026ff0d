// The config.json of Hugging Face's Llama family (LlamaForCausalLM, and the presets of
// src/checkpoint/hf_presets.cpp that share LlamaConfig's fields) for a tptrain model of that block
// specification (docs/checkpoints.md, "Llama"); its file format: io/hf_llama_config.hpp. Which
// checkpoint rows are which HF tensor is the rows' own (model::ParameterRow::hf).
//
// The two models compute the same function: pre-RMSNorm blocks (ε = model.norm_eps /
// rms_norm_eps), rotary embeddings on q and k with base model.rope_theta / rope_theta (scaled as
// model.position = "llama3" or "yarn" / rope_scaling's rope_type says) in HF's
// rotate-half convention (feature i of a head pairs with feature i + d/2, LlamaRotaryEmbedding
// and apply_rotary_pos_emb), grouped-query attention with model.kv_heads / num_key_value_heads
// (key/value head j serves query heads j·nh/nkv … (j+1)·nh/nkv − 1, HF's repeat_kv), scores
// scaled by 1/√d with the causal mask, the SwiGLU MLP down(silu(gate(x)) · up(x)), no biases, a
// final RMSNorm, lm_head untied unless model.tie_embeddings. Every weight is nn.Linear's
// [out, in] in both, so nothing is transposed and nothing permuted: tptrain's RoPE is HF's
// rotate-half, so HF's q_proj/k_proj rows are used as they are (Meta's original checkpoints pair
// adjacent features and need HF's permute when converted; tptrain's do not). What differs is the
// fusion: the checkpoint's attn/qkv/weight stacks [Q: nh·d | K: nkv·d | V: nkv·d] rows, head h
// owning rows h·d … h·d+d−1 of its block, whatever tensor-parallel layout wrote it, which are
// q_proj, k_proj and v_proj in that order; mlp/fc/weight stacks [gate: F | up: F], gate_proj and
// up_proj.
//
// Mixtral (MixtralForCausalLM, HfConfigFamily::mixtral) is this model with a mixture of E SwiGLU
// experts as the MLP (docs/checkpoints.md, "Mixtral"): router logits x·Wgᵀ (block_sparse_moe.gate,
// [E, H], the checkpoint's mlp/router/weight), their softmax over the E experts, the top k
// renormalised to sum to 1, and the weighted sum of those experts' down(silu(gate(x)) · up(x));
// expert e's mlp/experts/e/fc/weight stacks [gate: F | up: F], its w1 and w3, and
// mlp/experts/e/proj/weight is its w2. Dropless, as HF's MixtralSparseMoeBlock.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "src/model/spec/gpt_shape.hpp"
#include "src/checkpoint/hf_presets.hpp"
#include "src/checkpoint/hf_decoder.hpp"

namespace tptrain::checkpoint {

// The preset's config.json for `shape` (pretty-printed JSON). The fields every decoder family
// shares (max_position_embeddings, rope_scaling, ...) as src/checkpoint/hf_decoder.hpp writes
// them; MixtralConfig has no rope_scaling, so a mixtral model with one is refused. A mixtral
// preset's config (MixtralConfig's fields) carries num_local_experts = model.experts,
// num_experts_per_tok = model.experts_per_token and router_aux_loss_coef (MixtralConfig's 0.001
// when not given).
std::string hf_llama_config(const model::GptShape& shape, const HfPreset& preset,
                            std::optional<double> router_aux_loss_coef = std::nullopt);

// What import needs from a config.json, checked to describe a model tptrain computes exactly;
// the fields every decoder family shares are HfDecoderConfig's.
struct HfLlamaConfig : HfDecoderConfig {
  int kv_heads = 0;
  // Mixtral's: E and k (0 for the others), and the attention window (none: nullopt).
  int experts = 0, experts_per_token = 0;
  std::optional<int> sliding_window;
};
// Reads and checks `path`: the preset's model_type, hidden_act silu, no attention or MLP biases, no
// sliding window, rope_scaling null or of a type tptrain has as a rotary kind ("llama3", "yarn";
// another is refused by name, as are fields that kind does not model), head_dim (when given) hidden_size / num_attention_heads; num_key_value_heads null
// means num_attention_heads. A mixtral preset's file must give num_local_experts and
// num_experts_per_tok, k <= E (MixtralConfig's defaults, 8 and 2, are one model's: a file without
// them is refused); its sliding_window is checked against the deck (hf_config_mismatch). Throws
// std::runtime_error naming the file and the field.
HfLlamaConfig read_hf_llama_config(const std::string& path, const HfPreset& preset);

// The deck's keys against the config's fields: "" if they agree, else one line per difference,
// naming both ("config.json num_key_value_heads = 8, the deck's model.kv_heads = 32"). A
// mixture of experts' deck compares num_local_experts and num_experts_per_tok, and refuses a
// sliding_window shorter than its model.seq_length (one as long or longer never hides a key).
std::string hf_config_mismatch(const HfLlamaConfig& config, const model::GptShape& shape);

}  // namespace tptrain::checkpoint
