// config.json of a Hugging Face Llama (transformers' LlamaConfig) as a file format: its fields,
// their JSON types and LlamaConfig's defaults for the ones a file leaves out. Whether a config
// describes a model tptrain computes is the caller's question (src/checkpoint/hf_llama.hpp); this
// layer knows the file, not the model's math. The fields it shares with the other decoder-only
// configs: io/hf_decoder_config.hpp. MixtralConfig (model_type "mixtral") is the same file for
// attention, norms and positions, with the mixture of experts' fields added and other defaults;
// it is read by the same function.
#pragma once

#include <optional>
#include <string>

#include "io/hf_decoder_config.hpp"

namespace tptrain::io {

struct LlamaConfigFile : DecoderConfigFile {
  std::optional<int> head_dim;  // null or absent: hidden_size / num_attention_heads
  bool attention_bias = false, mlp_bias = false;
  bool use_sliding_window = false;  // Qwen2Config's sliding-window attention
  int pretraining_tp = 1;
  // MixtralConfig's mixture of experts (absent from LlamaConfig and Qwen2Config files):
  // num_local_experts E and num_experts_per_tok k, nullopt when absent or null (MixtralConfig's
  // defaults, 8 and 2, are Mixtral-8x7B's: a file that leaves them out describes no particular
  // model); the load-balancing loss's weight; the router's training-time jitter; a sliding
  // attention window (null or absent: none).
  std::optional<int> num_local_experts, num_experts_per_tok;
  double router_aux_loss_coef = 0.001;
  double router_jitter_noise = 0.0;
  bool output_router_logits = false;
  std::optional<int> sliding_window;
};

// The config as save_pretrained writes it (pretty-printed, keys sorted, architectures
// [architecture], torch_dtype float32), every LlamaConfig field above included; rope_scaling null
// or its type's fields (sorted).
std::string llama_config_text(const LlamaConfigFile& config);
// MixtralConfig's fields, as save_pretrained writes a MixtralForCausalLM's config (keys sorted,
// architectures [architecture], torch_dtype float32): LlamaConfig's above but its bias switches,
// pretraining_tp, rope_scaling and use_sliding_window (MixtralConfig has none), and the mixture's.
std::string mixtral_config_text(const LlamaConfigFile& config);

// Reads `path`: a JSON object; the sizes positive integers when present, num_key_value_heads and
// head_dim positive integers or null; the other fields, when present, of their type (absent:
// LlamaConfig's defaults above). A model_type "mixtral" file has MixtralConfig's defaults
// instead: num_key_value_heads absent is 8 (null: num_attention_heads), rms_norm_eps 1e-5,
// rope_theta 1e6; num_local_experts, num_experts_per_tok and sliding_window positive integers or
// null (read from mixtral files only). Throws std::runtime_error "Hugging Face config <path>: <what>".
LlamaConfigFile read_llama_config(const std::string& path);

}  // namespace tptrain::io
