#include "io/hf_gpt2_config.hpp"

#include "io/hf_config.hpp"

namespace tptrain::io {

std::string gpt2_config_text(const Gpt2ConfigFile& c) {
  HfConfigWriter w;
  w.set("architectures", std::vector<std::string>{"GPT2LMHeadModel"});
  w.set("model_type", c.model_type);
  w.set("vocab_size", c.vocab_size);
  w.set("n_positions", c.n_positions);
  w.set("n_ctx", c.n_positions);  // the older name, still read by some tools
  w.set("n_embd", c.n_embd);
  w.set("n_layer", c.n_layer);
  w.set("n_head", c.n_head);
  w.set("n_inner", c.n_inner);
  w.set("activation_function", c.activation_function);
  w.set("layer_norm_epsilon", c.layer_norm_epsilon);
  w.set("initializer_range", 0.02);
  w.set("resid_pdrop", c.resid_pdrop);
  w.set("embd_pdrop", c.embd_pdrop);
  w.set("attn_pdrop", c.attn_pdrop);
  w.set("scale_attn_weights", c.scale_attn_weights);
  w.set("scale_attn_by_inverse_layer_idx", c.scale_attn_by_inverse_layer_idx);
  w.set("reorder_and_upcast_attn", c.reorder_and_upcast_attn);
  w.set("add_cross_attention", c.add_cross_attention);
  w.set("tie_word_embeddings", c.tie_word_embeddings);
  w.set("use_cache", true);
  if (c.bos_token_id) w.set("bos_token_id", *c.bos_token_id);
  if (c.eos_token_id) w.set("eos_token_id", *c.eos_token_id);
  w.set("torch_dtype", "float32");
  return w.text();
}

Gpt2ConfigFile read_gpt2_config(const std::string& path) {
  const HfConfigFields f(path);
  Gpt2ConfigFile c;
  f.text("model_type", &c.model_type);
  c.n_layer = f.positive("n_layer").value_or(0);
  c.n_embd = f.positive("n_embd").value_or(0);
  c.n_head = f.positive("n_head").value_or(0);
  c.vocab_size = f.positive("vocab_size").value_or(0);
  c.n_positions = f.positive("n_positions").value_or(0);
  c.n_inner = f.positive("n_inner");
  f.text("activation_function", &c.activation_function);
  f.number("layer_norm_epsilon", &c.layer_norm_epsilon);
  f.flag("tie_word_embeddings", &c.tie_word_embeddings);
  f.flag("scale_attn_weights", &c.scale_attn_weights);
  f.flag("scale_attn_by_inverse_layer_idx", &c.scale_attn_by_inverse_layer_idx);
  f.flag("reorder_and_upcast_attn", &c.reorder_and_upcast_attn);
  f.flag("add_cross_attention", &c.add_cross_attention);
  f.number("resid_pdrop", &c.resid_pdrop);
  f.number("embd_pdrop", &c.embd_pdrop);
  f.number("attn_pdrop", &c.attn_pdrop);
  c.bos_token_id = f.integer("bos_token_id");
  c.eos_token_id = f.integer("eos_token_id");
  return c;
}

}  // namespace tptrain::io
