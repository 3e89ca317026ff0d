// The config.json of Hugging Face's Llama family (LlamaForCausalLM, and the presets of
// src/checkpoint/hf_presets.cpp that share LlamaConfig's fields) for a tptrain model of that block
// specification (docs/checkpoints.md, "Llama"); its file format: io/hf_llama_config.hpp. Which
// checkpoint rows are which HF tensor is the rows' own (model::ParameterRow::hf).
//
// The two models compute the same function: pre-RMSNorm blocks (ε = model.norm_eps /
// rms_norm_eps), rotary embeddings on q and k with base model.rope_theta / rope_theta in HF's
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
#pragma once

#include <string>
#include <vector>

#include "src/model/gpt_shape.hpp"
#include "src/checkpoint/hf_presets.hpp"

namespace tptrain::checkpoint {

// The preset's config.json for `shape` (pretty-printed JSON). max_position_embeddings is
// the deck's model.seq_length, the context the model was trained with.
std::string hf_llama_config(const model::GptShape& shape, const HfPreset& preset);

// What import needs from a config.json, checked to describe a model tptrain computes exactly.
struct HfLlamaConfig {
  int layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn_hidden = 0, vocab_size = 0, positions = 0;
  double norm_eps = 0, rope_theta = 0;
  bool tie_embeddings = false;
};
// Reads and checks `path`: the preset's model_type, hidden_act silu, no attention or MLP biases, no
// sliding window, no rope_scaling, head_dim (when given) hidden_size / num_attention_heads; num_key_value_heads null
// means num_attention_heads. Throws std::runtime_error naming the file and the field.
HfLlamaConfig read_hf_llama_config(const std::string& path, const HfPreset& preset);

// The deck's keys against the config's fields: "" if they agree, else one line per difference,
// naming both ("config.json num_key_value_heads = 8, the deck's model.kv_heads = 32").
std::string hf_config_mismatch(const HfLlamaConfig& config, const model::GptShape& shape);

}  // namespace tptrain::checkpoint
