#include "io/hf_llama_config.hpp"

#include "io/hf_config.hpp"

namespace tptrain::io {

std::string llama_config_text(const LlamaConfigFile& c) {
  HfConfigWriter w;
  set_decoder_fields(w, c, true);
  w.set("attention_bias", c.attention_bias);
  w.set("head_dim", c.head_dim);
  w.set("mlp_bias", c.mlp_bias);
  w.set("pretraining_tp", c.pretraining_tp);
  w.set("use_sliding_window", c.use_sliding_window);
  return w.sorted_text();
}

std::string mixtral_config_text(const LlamaConfigFile& c) {
  HfConfigWriter w;
  set_decoder_fields(w, c, false);
  w.set("head_dim", c.head_dim);
  w.set("num_experts_per_tok", c.num_experts_per_tok);
  w.set("num_local_experts", c.num_local_experts);
  w.set("output_router_logits", c.output_router_logits);
  w.set("router_aux_loss_coef", c.router_aux_loss_coef);
  w.set("router_jitter_noise", c.router_jitter_noise);
  w.set("sliding_window", c.sliding_window);
  return w.sorted_text();
}

LlamaConfigFile read_llama_config(const std::string& path) {
  const HfConfigFields f(path);
  LlamaConfigFile c;
  read_decoder_fields(f, c);
  const bool mixtral = c.model_type == "mixtral";
  if (mixtral) {  // MixtralConfig's defaults where LlamaConfig's differ
    if (!f.has("rms_norm_eps")) c.rms_norm_eps = 1e-5;
    if (!f.has("rope_theta")) c.rope_theta = 1e6;
    if (!f.has("num_key_value_heads")) c.num_key_value_heads = 8;  // null: num_attention_heads
  }
  c.head_dim = f.positive("head_dim");
  f.flag("attention_bias", &c.attention_bias);
  f.flag("mlp_bias", &c.mlp_bias);
  f.flag("use_sliding_window", &c.use_sliding_window);
  c.pretraining_tp = f.positive("pretraining_tp").value_or(1);
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
