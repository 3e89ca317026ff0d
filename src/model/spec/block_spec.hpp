// The block specification (docs/design.md, "The block specification"): the choices a transformer
// block is made of, as a value — what Megatron-Core's TransformerConfig holds (normalization,
// gated_linear_unit, add_bias_linear, position_embedding_type, num_query_groups). An architecture
// (model.architecture) is a named preset of it; the deck may override each choice
// (model.norm, model.position, model.attention, model.mlp, model.qkv_bias, model.linear_bias,
// model.tie_embeddings).
//
// Plain data, no Kokkos, no MPI: the deck (io/) resolves its keys from it, the model (src/model/)
// derives its parameter and buffer rows, FLOPs and Hugging Face names from it, the planner counts
// from it. Adding an architecture is a row of kBlockPresets (plus its Hugging Face preset,
// src/checkpoint/hf_presets.cpp, when it has one), a deck and tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "base/rules.hpp"

namespace tptrain::model {

// The choices of a block's slots are the names of sublayer kinds (src/model/spec/sublayer_kinds.hpp,
// which the deck checks them against): the norm ("layernorm", "rmsnorm"), the positions
// ("learned", "rope", "llama3", "yarn") and the MLP ("gelu", "swiglu", "moe", ...). Each kind's own keys (model.norm_eps
// of RMSNorm, model.rope_theta of rotary positions, the mixture's sizes) are fields here, read by
// the kind.
struct BlockSpec {
  std::string architecture = "gpt2";  // the preset it started from (model.architecture)
  std::string norm = "layernorm";
  double norm_eps = 1e-5;             // the norm's ε (model.norm_eps)
  std::string mlp = "gelu";           // the MLP's kind (model.mlp)
  std::string position = "learned";
  std::string attention = "gqa";      // the attention's kind (model.attention)
  // How the block joins its kinds (block_descriptor.hpp, kResidualPatterns): "pre_norm", every
  // preset's; not a deck key while it is the only one.
  std::string residual = "pre_norm";
  double rope_theta = 10000.0;        // the rotary base θ (rotary positions; model.rope_theta)
  // Scaled rotary positions (position = llama3, yarn; llama3_rope_kind.hpp, yarn_rope_kind.hpp):
  // the context's scale factor and the context the model was pretrained with (both kinds'), the
  // band edges of Llama 3.1's interpolation, YaRN's ramp (β fast, β slow) and magnitudes (mscale,
  // mscale_all_dim; 0: not given, as Hugging Face's None).
  double rope_factor = 8.0;
  int rope_original_max_positions = 8192;
  double rope_low_freq_factor = 1.0, rope_high_freq_factor = 4.0;
  double rope_beta_fast = 32.0, rope_beta_slow = 1.0, rope_mscale = 0.0, rope_mscale_all_dim = 0.0;
  bool qkv_bias = true;               // a bias on the QKV projection (model.qkv_bias)
  // Biases on the other projections (attention output, MLP) and on the norm when it has one
  // (LayerNorm): model.linear_bias.
  bool linear_bias = true;
  int kv_heads = 0;                   // key/value heads (grouped-query attention); 0 stands for heads
  // Multi-head latent attention (attention = "mla"; DeepSeek-V2 §2.1, DeepSeek-V3): queries
  // through a latent of model.q_lora_rank (0: one projection, DeepSeek-V2-Lite), keys and values
  // decompressed from a latent of model.kv_lora_rank that the heads share, each head's query and
  // key of qk_nope_head_dim + qk_rope_head_dim features (the key's rotary part shared by the
  // heads), its value of v_head_dim (Hugging Face's names). DeepSeek-V3's sizes by default.
  int q_lora_rank = 1536, kv_lora_rank = 512, qk_nope_head_dim = 128, qk_rope_head_dim = 64, v_head_dim = 128;
  bool tie_embeddings = true;         // the output layer is the word embedding, or its own lm_head/weight
  // GPT-2 scales the residual projections' initial values by 1/√(2L) (Radford et al. 2019, 2.3);
  // Hugging Face's Llama initialises every matrix with the same σ. A preset's choice.
  bool scaled_residual_init = true;
  // The mixture of experts (mlp = moe; Mixtral, Jiang et al. 2024): E SwiGLU experts of
  // ffn_hidden each (model.experts), k of them per token (model.experts_per_token), chosen by a
  // router and weighted by its softmax renormalised over the k. Dropless unless a capacity factor
  // c > 0 (model.moe_capacity_factor) caps each expert at ceil(c·k·N/E) of a micro-batch's N tokens.
  int experts = 8;
  int experts_per_token = 2;
  double moe_capacity_factor = 0.0;
  // DeepSeekMoE (Dai et al. 2024; DeepSeek-V3 §2.1.2): fine-grained routed experts of their own
  // width F_e (model.moe_ffn_hidden; 0: model.ffn_hidden, Mixtral's), n_s shared experts every
  // token goes through, computed as one SwiGLU of n_s·F_e (model.moe_shared_experts), and the
  // first k blocks with a dense SwiGLU of model.ffn_hidden instead of the mixture
  // (model.moe_dense_layers; Hugging Face's first_k_dense_replace; block_shape).
  int moe_ffn_hidden = 0;
  int moe_shared_experts = 0;
  int moe_dense_layers = 0;
  // How the router scores and chooses (DeepSeek-V3 §2.1.2; kernels::MoeRouting): "softmax" over
  // the experts (Mixtral) or "sigmoid" per expert (model.moe_score_function); the experts in
  // model.moe_groups groups, of which model.moe_groups_per_token compete for each token (the
  // groups of highest top-2 score); the top k's scores renormalised to sum to 1
  // (model.moe_norm_topk_prob) and scaled by model.moe_routed_scaling.
  std::string moe_score_function = "softmax";
  int moe_groups = 1, moe_groups_per_token = 1;
  bool moe_norm_topk_prob = true;
  double moe_routed_scaling = 1.0;
  // DeepSeek-V3's auxiliary-loss-free balancing: after each step each expert's bias (which only
  // chooses) moves by this rate towards balance, b_e += γ · sign(mean load − load_e)
  // (training.moe_bias_update_rate; 0: the bias stays, as a sigmoid router's without balancing).
  double moe_bias_update_rate = 0.0;
  // The weights of its load-balancing loss and router z-loss in the training loss
  // (training.moe_aux_loss_coeff, training.moe_z_loss_coeff); 0: they add no gradient.
  double moe_aux_loss_coeff = 0.0;
  double moe_z_loss_coeff = 0.0;
  // The load-balancing loss per sequence (DeepSeek-V3's sequence-wise balance loss, §2.1.2) rather
  // than per micro-batch (Switch's; training.moe_aux_loss_per_sequence).
  bool moe_aux_loss_per_sequence = false;
};

// The named architectures. Their fields are the defaults of the deck's keys.
struct BlockPreset {
  const char* name;
  const char* what;  // for the key table and messages
  BlockSpec spec;
};

inline BlockSpec make_spec(const char* name, const char* norm, const char* mlp, const char* position, bool qkv_bias,
                           bool linear_bias, bool tie_embeddings, bool scaled_residual_init,
                           const char* attention = "gqa") {
  BlockSpec s;
  s.architecture = name;
  s.attention = attention;
  s.norm = norm;
  s.mlp = mlp;
  s.position = position;
  s.qkv_bias = qkv_bias;
  s.linear_bias = linear_bias;
  s.tie_embeddings = tie_embeddings;
  s.scaled_residual_init = scaled_residual_init;
  return s;
}

inline const BlockPreset* block_presets(std::size_t& count) {
  static const BlockPreset presets[] = {
      {"gpt2", "LayerNorm, biases, GELU, learned positions, tied head (GPT2LMHeadModel)",
       make_spec("gpt2", "layernorm", "gelu", "learned", true, true, true, true)},
      {"llama", "RMSNorm, no biases, SwiGLU, rotary positions, grouped-query attention, untied head (LlamaForCausalLM)",
       make_spec("llama", "rmsnorm", "swiglu", "rope", false, false, false, false)},
      {"qwen2", "llama with q/k/v biases (Qwen2ForCausalLM)",
       make_spec("qwen2", "rmsnorm", "swiglu", "rope", true, false, false, false)},
      {"mixtral", "llama with a mixture of SwiGLU experts as its MLP, top-k routed (MixtralForCausalLM)",
       make_spec("mixtral", "rmsnorm", "moe", "rope", false, false, false, false)},
      {"deepseek_v3", "llama with multi-head latent attention and a mixture of experts (DeepseekV3ForCausalLM)",
       make_spec("deepseek_v3", "rmsnorm", "moe", "rope", false, false, false, false, "mla")},
  };
  count = sizeof(presets) / sizeof(presets[0]);
  return presets;
}

// The preset `name`, or nullptr.
inline const BlockPreset* block_preset(std::string_view name) {
  std::size_t n = 0;
  const BlockPreset* p = block_presets(n);
  for (std::size_t i = 0; i < n; ++i)
    if (name == p[i].name) return &p[i];
  return nullptr;
}

// The choices a preset gives defaults to, each by its [model] key: a deck that leaves one out has
// the preset's (the deck's parser and take_preset_defaults walk this one list).
struct PresetChoice {
  std::string_view key;
  void (*take)(BlockSpec& to, const BlockSpec& preset);
};
inline const std::vector<PresetChoice>& preset_choices() {
  static const std::vector<PresetChoice> keys = {
      {"norm", [](BlockSpec& m, const BlockSpec& p) { m.norm = p.norm; }},
      {"mlp", [](BlockSpec& m, const BlockSpec& p) { m.mlp = p.mlp; }},
      {"position", [](BlockSpec& m, const BlockSpec& p) { m.position = p.position; }},
      {"attention", [](BlockSpec& m, const BlockSpec& p) { m.attention = p.attention; }},
      {"qkv_bias", [](BlockSpec& m, const BlockSpec& p) { m.qkv_bias = p.qkv_bias; }},
      {"linear_bias", [](BlockSpec& m, const BlockSpec& p) { m.linear_bias = p.linear_bias; }},
      {"tie_embeddings", [](BlockSpec& m, const BlockSpec& p) { m.tie_embeddings = p.tie_embeddings; }},
  };
  return keys;
}
// What a preset fixes that no key overrides: GPT-2's scaled residual initialisation or not.
inline void take_preset_fixed(BlockSpec& to, const BlockSpec& preset) { to.scaled_residual_init = preset.scaled_residual_init; }

// Sets s's preset choices and what the preset fixes to those of the preset s.architecture (a
// specification built in code, as the deck's parser sets them); false when it names no preset.
inline bool take_preset_defaults(BlockSpec& s) {
  const BlockPreset* p = block_preset(s.architecture);
  if (p == nullptr) return false;
  for (const PresetChoice& c : preset_choices()) c.take(s, p->spec);
  take_preset_fixed(s, p->spec);
  return true;
}

// "gpt2", "llama", "qwen2": the names model.architecture takes, comma-separated (messages).
inline std::string block_preset_names() {
  std::size_t n = 0;
  const BlockPreset* p = block_presets(n);
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += (i ? ", " : "") + std::string("\"") + p[i].name + "\"";
  return out;
}

}  // namespace tptrain::model
