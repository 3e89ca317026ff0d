// config.json of a Hugging Face DeepSeek-V3 (transformers' DeepseekV3Config, and the fields
// DeepSeek's own files add) as a file format: its fields, their JSON types and DeepseekV3Config's
// defaults for the ones a file leaves out. Whether a config describes a model tptrain computes is
// the caller's question (src/checkpoint/hf_deepseek.hpp); this layer knows the file, not the
// model's math. The fields it shares with the other decoder-only configs: io/hf_decoder_config.hpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/hf_decoder_config.hpp"

namespace tptrain::io {

struct DeepseekV3ConfigFile : DecoderConfigFile {
  DeepseekV3ConfigFile() { architecture = "DeepseekV3ForCausalLM"; }
  // The sizes beyond the shared ones: 0 when absent. DeepseekV3Config defaults them to DeepSeek-V3's
  // own (256 experts, ...), but a file that leaves them out describes no particular model.
  int moe_intermediate_size = 0, n_routed_experts = 0, num_experts_per_tok = 0, kv_lora_rank = 0,
      qk_rope_head_dim = 0, v_head_dim = 0, qk_nope_head_dim = 0;
  // q_lora_rank: null for queries projected at once (DeepSeek-V2-Lite); absent: -1 (no size given).
  int q_lora_rank = -1;
  // Newer transformers write DeepseekV3Config's derived fields too: head_dim (the rotary part,
  // qk_rope_head_dim) and qk_head_dim (qk_nope_head_dim + qk_rope_head_dim). null or absent: not given.
  std::optional<int> head_dim, qk_head_dim;
  // Absent: DeepseekV3Config's defaults. n_shared_experts, first_k_dense_replace and
  // num_nextn_predict_layers may be 0 (read as non-negative integers).
  int n_shared_experts = 1, n_group = 8, topk_group = 4, first_k_dense_replace = 3, moe_layer_freq = 1;
  double routed_scaling_factor = 2.5;
  bool norm_topk_prob = true;
  // DeepSeek's routing as its files name it; transformers' DeepseekV3 computes "sigmoid" and
  // "noaux_tc" whatever they say.
  std::string scoring_func = "sigmoid", topk_method = "noaux_tc";
  // The rotary rows' order: adjacent pairs (DeepSeek's checkpoints, true) or rotate-half halves.
  bool rope_interleave = true;
  bool attention_bias = false;
  // Multi-token prediction modules after the num_hidden_layers blocks (DeepSeek-V3: 1).
  int num_nextn_predict_layers = 0;
  // quantization_config (DeepSeek-V3's: fp8, e4m3, blocks of [128, 128]); absent: not quantised.
  struct Quantization {
    std::string quant_method, fmt;
    std::optional<std::vector<int>> weight_block_size;
  };
  std::optional<Quantization> quantization;
};

// The config as save_pretrained writes a DeepseekV3ForCausalLM's (pretty-printed, keys sorted,
// architectures [architecture], torch_dtype float32), q_lora_rank null when 0 and
// rope_scaling null or its type's fields; no quantization_config (tptrain writes float32).
std::string deepseek_v3_config_text(const DeepseekV3ConfigFile& config);

// Reads `path`: a JSON object; the sizes positive integers when present (num_key_value_heads,
// q_lora_rank (null: 0), head_dim and qk_head_dim positive or null); n_shared_experts, first_k_dense_replace
// and num_nextn_predict_layers integers >= 0; the other fields, when present, of their type
// (absent: the defaults above). Throws std::runtime_error "Hugging Face config <path>: <what>".
DeepseekV3ConfigFile read_deepseek_v3_config(const std::string& path);

}  // namespace tptrain::io
