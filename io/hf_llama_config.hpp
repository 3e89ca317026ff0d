// config.json of a Hugging Face Llama (transformers' LlamaConfig) as a file format: its fields,
// their JSON types and LlamaConfig's defaults for the ones a file leaves out. Whether a config
// describes a model tptrain computes is the caller's question (src/checkpoint/hf_llama.hpp); this
// layer knows the file, not the model's math. Read and written through io/hf_config.hpp.
#pragma once

#include <optional>
#include <string>

namespace tptrain::io {

struct LlamaConfigFile {
  std::string architecture = "LlamaForCausalLM";  // written as architectures[0]
  std::string model_type;  // "" when absent
  // 0 when absent (LlamaConfig has defaults for them, Llama-2-7B's, but a file that leaves the
  // model's shape out describes no particular model).
  int num_hidden_layers = 0, hidden_size = 0, num_attention_heads = 0, intermediate_size = 0, vocab_size = 0;
  int max_position_embeddings = 0;
  std::optional<int> num_key_value_heads;  // null or absent: num_attention_heads (multi-head attention)
  std::optional<int> head_dim;             // null or absent: hidden_size / num_attention_heads
  std::string hidden_act = "silu";
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool rope_scaling = false;  // a rope_scaling object is present (not null)
  bool tie_word_embeddings = false;
  bool attention_bias = false, mlp_bias = false;
  bool use_sliding_window = false;  // Qwen2Config's sliding-window attention
  double attention_dropout = 0.0;
  int pretraining_tp = 1;
  std::optional<int> bos_token_id, eos_token_id;
};

// The config as save_pretrained writes it (pretty-printed, keys sorted, architectures
// [architecture], torch_dtype float32, rope_scaling null), every field above included.
std::string llama_config_text(const LlamaConfigFile& config);

// Reads `path`: a JSON object; the sizes positive integers when present, num_key_value_heads and
// head_dim positive integers or null; the other fields, when present, of their type (absent:
// LlamaConfig's defaults above). Throws std::runtime_error "Hugging Face config <path>: <what>".
LlamaConfigFile read_llama_config(const std::string& path);

}  // namespace tptrain::io
