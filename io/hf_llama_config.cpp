#include "io/hf_llama_config.hpp"

#include "io/hf_config.hpp"

namespace tptrain::io {

namespace {

HfConfigWriter rope_scaling_object(const RopeScalingFile& r) {
  std::map<std::string, const double*> sorted;  // save_pretrained writes a dict's keys sorted
  for (const auto& [key, value] : r.numbers) sorted[key] = &value;
  sorted["rope_type"] = nullptr;
  HfConfigWriter w;
  for (const auto& [key, value] : sorted) {
    if (value == nullptr) w.set("rope_type", r.rope_type);
    else if (key == "original_max_position_embeddings") w.set(key.c_str(), static_cast<int>(*value));  // an int
    else w.set(key.c_str(), *value);
  }
  if (r.truncate) w.set("truncate", *r.truncate);
  return w;
}

RopeScalingFile read_rope_scaling(const HfConfigFields& f) {
  RopeScalingFile r;
  for (const std::string& key : f.keys()) {
    if (key == "type" || key == "rope_type") f.text(key.c_str(), &r.rope_type);  // "type": the older spelling
    else if (key == "truncate" && !f.is_null("truncate")) f.flag("truncate", &r.truncate.emplace());
    else if (f.is_number(key.c_str())) f.number(key.c_str(), &r.numbers[key]);
    else if (!f.is_null(key.c_str())) r.others.push_back(key);
  }
  return r;
}

}  // namespace

std::string llama_config_text(const LlamaConfigFile& c) {
  HfConfigWriter w;  // in save_pretrained's order: keys sorted
  w.set("architectures", std::vector<std::string>{c.architecture});
  w.set("attention_bias", c.attention_bias);
  w.set("attention_dropout", c.attention_dropout);
  w.set("bos_token_id", c.bos_token_id);
  w.set("eos_token_id", c.eos_token_id);
  w.set("head_dim", c.head_dim);
  w.set("hidden_act", c.hidden_act);
  w.set("hidden_size", c.hidden_size);
  w.set("initializer_range", 0.02);
  w.set("intermediate_size", c.intermediate_size);
  w.set("max_position_embeddings", c.max_position_embeddings);
  w.set("mlp_bias", c.mlp_bias);
  w.set("model_type", c.model_type);
  w.set("num_attention_heads", c.num_attention_heads);
  w.set("num_hidden_layers", c.num_hidden_layers);
  w.set("num_key_value_heads", c.num_key_value_heads);
  w.set("pretraining_tp", c.pretraining_tp);
  w.set("rms_norm_eps", c.rms_norm_eps);
  if (c.rope_scaling)
    w.set("rope_scaling", rope_scaling_object(*c.rope_scaling));
  else
    w.set("rope_scaling", std::optional<int>());  // null: none
  w.set("rope_theta", c.rope_theta);
  w.set("tie_word_embeddings", c.tie_word_embeddings);
  w.set("torch_dtype", "float32");
  w.set("use_cache", true);
  w.set("use_sliding_window", c.use_sliding_window);
  w.set("vocab_size", c.vocab_size);
  return w.text();
}

std::string mixtral_config_text(const LlamaConfigFile& c) {
  HfConfigWriter w;  // in save_pretrained's order: keys sorted
  w.set("architectures", std::vector<std::string>{c.architecture});
  w.set("attention_dropout", c.attention_dropout);
  w.set("bos_token_id", c.bos_token_id);
  w.set("eos_token_id", c.eos_token_id);
  w.set("head_dim", c.head_dim);
  w.set("hidden_act", c.hidden_act);
  w.set("hidden_size", c.hidden_size);
  w.set("initializer_range", 0.02);
  w.set("intermediate_size", c.intermediate_size);
  w.set("max_position_embeddings", c.max_position_embeddings);
  w.set("model_type", c.model_type);
  w.set("num_attention_heads", c.num_attention_heads);
  w.set("num_experts_per_tok", c.num_experts_per_tok);
  w.set("num_hidden_layers", c.num_hidden_layers);
  w.set("num_key_value_heads", c.num_key_value_heads);
  w.set("num_local_experts", c.num_local_experts);
  w.set("output_router_logits", c.output_router_logits);
  w.set("rms_norm_eps", c.rms_norm_eps);
  w.set("rope_theta", c.rope_theta);
  w.set("router_aux_loss_coef", c.router_aux_loss_coef);
  w.set("router_jitter_noise", c.router_jitter_noise);
  w.set("sliding_window", c.sliding_window);
  w.set("tie_word_embeddings", c.tie_word_embeddings);
  w.set("torch_dtype", "float32");
  w.set("use_cache", true);
  w.set("vocab_size", c.vocab_size);
  return w.text();
}

LlamaConfigFile read_llama_config(const std::string& path) {
  const HfConfigFields f(path);
  LlamaConfigFile c;
  f.text("model_type", &c.model_type);
  const bool mixtral = c.model_type == "mixtral";
  if (mixtral) {  // MixtralConfig's defaults where LlamaConfig's differ
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 1e6;
  }
  c.num_hidden_layers = f.positive("num_hidden_layers").value_or(0);
  c.hidden_size = f.positive("hidden_size").value_or(0);
  c.num_attention_heads = f.positive("num_attention_heads").value_or(0);
  c.intermediate_size = f.positive("intermediate_size").value_or(0);
  c.vocab_size = f.positive("vocab_size").value_or(0);
  c.max_position_embeddings = f.positive("max_position_embeddings").value_or(0);
  c.num_key_value_heads = f.positive("num_key_value_heads");
  if (mixtral && !f.has("num_key_value_heads")) c.num_key_value_heads = 8;  // null: num_attention_heads
  c.head_dim = f.positive("head_dim");
  f.text("hidden_act", &c.hidden_act);
  f.number("rms_norm_eps", &c.rms_norm_eps);
  f.number("rope_theta", &c.rope_theta);
  if (const std::optional<HfConfigFields> scaling = f.object("rope_scaling"))
    c.rope_scaling = read_rope_scaling(*scaling);
  f.flag("tie_word_embeddings", &c.tie_word_embeddings);
  f.flag("attention_bias", &c.attention_bias);
  f.flag("mlp_bias", &c.mlp_bias);
  f.flag("use_sliding_window", &c.use_sliding_window);
  f.number("attention_dropout", &c.attention_dropout);
  c.pretraining_tp = f.positive("pretraining_tp").value_or(1);
  c.bos_token_id = f.integer("bos_token_id");
  c.eos_token_id = f.integer("eos_token_id");
  if (!mixtral) return c;  // the fields below are MixtralConfig's only (Qwen2Config has its own sliding_window)
  c.num_local_experts = f.positive("num_local_experts");
  c.num_experts_per_tok = f.positive("num_experts_per_tok");
  f.number("router_aux_loss_coef", &c.router_aux_loss_coef);
  f.number("router_jitter_noise", &c.router_jitter_noise);
  f.flag("output_router_logits", &c.output_router_logits);
  c.sliding_window = f.positive("sliding_window");
  return c;
}

}  // namespace tptrain::io
