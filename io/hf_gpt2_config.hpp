// config.json of a Hugging Face GPT-2 (transformers' GPT2Config) as a file format: its fields,
// their JSON types and GPT2Config's defaults for the ones a file leaves out. Whether a config
// describes a model tptrain computes is the caller's question (src/checkpoint/hf_gpt2.hpp); this layer
// knows the file, not the model's math. Read and written through io/hf_config.hpp.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

namespace tptrain::io {

struct Gpt2ConfigFile {
  std::string model_type;  // "" when absent
  int n_layer = 0, n_embd = 0, n_head = 0, vocab_size = 0, n_positions = 0;  // 0 when absent
  std::optional<int> n_inner;  // null or absent: GPT2Config's 4 * n_embd
  std::string activation_function = "gelu_new";
  double layer_norm_epsilon = 1e-5;
  bool tie_word_embeddings = true;
  bool scale_attn_weights = true;
  bool scale_attn_by_inverse_layer_idx = false;
  bool reorder_and_upcast_attn = false;
  bool add_cross_attention = false;
  double resid_pdrop = 0.1, embd_pdrop = 0.1, attn_pdrop = 0.1;
  std::optional<int> bos_token_id, eos_token_id;
};

// The config as save_pretrained writes it (pretty-printed, architectures GPT2LMHeadModel,
// torch_dtype float32), every field above included.
std::string gpt2_config_text(const Gpt2ConfigFile& config);

// Reads `path`: a JSON object; n_layer, n_embd, n_head, vocab_size, n_positions positive integers
// when present; n_inner a positive integer or null; the other fields, when present, of their type
// (absent: GPT2Config's defaults above). Throws std::runtime_error "Hugging Face config <path>: <what>".
Gpt2ConfigFile read_gpt2_config(const std::string& path);

}  // namespace tptrain::io
