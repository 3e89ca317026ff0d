#include "src/train/hf_format.hpp"

#include "src/train/hf_gpt2.hpp"
#include "src/train/hf_llama.hpp"

namespace tptrain::train {

namespace {

std::string gpt2_config_mismatch(const std::string& path, const model::GptShape& shape) {
  return hf_config_mismatch(read_hf_gpt2_config(path), shape);
}

std::string gpt2_shape_keys(const std::string& checkpoint_name) {
  std::string keys = "model.hidden / n_embd";
  if (checkpoint_name == "embedding/word" || checkpoint_name == "lm_head/weight")
    keys = "model.vocab_size / vocab_size, " + keys;
  if (checkpoint_name == "embedding/position") keys = "model.seq_length / n_positions, " + keys;
  if (checkpoint_name.find("/mlp/") != std::string::npos) keys += ", model.ffn_hidden / n_inner";
  return keys;
}

HfFormat gpt2_format(const model::GptShape& shape) {
  HfFormat f;
  f.architecture = "GPT2LMHeadModel";
  f.model_type = "gpt2";
  f.prefix = "transformer.";
  f.ignored_buffers = R"(h\.[0-9]+\.attn\.(bias|masked_bias))";
  if (shape.tie_embeddings) f.tied_to = "transformer.wte.weight";
  f.tensors = hf_gpt2_tensors(shape);
  // GPT-2's tokenizer (a vocabulary of 50257 or its padding): <|endoftext|> is bos and eos.
  f.config_json = hf_gpt2_config(shape, shape.vocab_size >= 50257);
  f.config_mismatch = gpt2_config_mismatch;
  f.shape_keys = gpt2_shape_keys;
  return f;
}

std::string llama_config_mismatch(const std::string& path, const model::GptShape& shape) {
  return hf_config_mismatch(read_hf_llama_config(path), shape);
}

std::string llama_shape_keys(const std::string& checkpoint_name) {
  std::string keys = "model.hidden / hidden_size";
  if (checkpoint_name == "embedding/word" || checkpoint_name == "lm_head/weight")
    keys = "model.vocab_size / vocab_size, " + keys;
  if (checkpoint_name.find("/attn/") != std::string::npos)
    keys += ", model.heads / num_attention_heads, model.kv_heads / num_key_value_heads";
  if (checkpoint_name.find("/mlp/") != std::string::npos) keys += ", model.ffn_hidden / intermediate_size";
  return keys;
}

HfFormat llama_format(const model::GptShape& shape) {
  HfFormat f;
  f.architecture = "LlamaForCausalLM";
  f.model_type = "llama";
  f.prefix = "model.";
  f.ignored_buffers = R"(layers\.[0-9]+\.self_attn\.rotary_emb\.inv_freq)";  // older transformers saved it
  if (shape.tie_embeddings) f.tied_to = "model.embed_tokens.weight";
  f.tensors = hf_llama_tensors(shape);
  f.config_json = hf_llama_config(shape);
  f.config_mismatch = llama_config_mismatch;
  f.shape_keys = llama_shape_keys;
  return f;
}

}  // namespace

HfFormat hf_format(const model::GptShape& shape) { return shape.rms() ? llama_format(shape) : gpt2_format(shape); }

}  // namespace tptrain::train
