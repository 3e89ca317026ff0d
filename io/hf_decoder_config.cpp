#include "io/hf_decoder_config.hpp"

#include <utility>

#include "io/hf_config.hpp"

namespace tptrain::io {

namespace {

HfConfigWriter rope_scaling_object(const RopeScalingFile& r) {
  HfConfigWriter w;
  w.set("rope_type", r.rope_type);
  for (const auto& [key, value] : r.numbers) {
    if (key == "original_max_position_embeddings") w.set(key.c_str(), static_cast<int>(value));  // an int
    else w.set(key.c_str(), value);
  }
  if (r.truncate) w.set("truncate", *r.truncate);
  return w;
}

RopeScalingFile rope_scaling_fields(const HfConfigFields& f) {
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

void set_decoder_fields(HfConfigWriter& w, const DecoderConfigFile& c, bool has_rope_scaling) {
  w.set("architectures", std::vector<std::string>{c.architecture});
  w.set("attention_dropout", c.attention_dropout);
  w.set("bos_token_id", c.bos_token_id);
  w.set("eos_token_id", c.eos_token_id);
  w.set("hidden_act", c.hidden_act);
  w.set("hidden_size", c.hidden_size);
  w.set("initializer_range", 0.02);
  w.set("intermediate_size", c.intermediate_size);
  w.set("max_position_embeddings", c.max_position_embeddings);
  w.set("model_type", c.model_type);
  w.set("num_attention_heads", c.num_attention_heads);
  w.set("num_hidden_layers", c.num_hidden_layers);
  w.set("num_key_value_heads", c.num_key_value_heads);
  w.set("rms_norm_eps", c.rms_norm_eps);
  if (has_rope_scaling && c.rope_scaling) w.set("rope_scaling", rope_scaling_object(*c.rope_scaling));
  else if (has_rope_scaling) w.set("rope_scaling", std::optional<int>());  // null: none
  w.set("rope_theta", c.rope_theta);
  w.set("tie_word_embeddings", c.tie_word_embeddings);
  w.set("torch_dtype", "float32");
  w.set("use_cache", true);
  w.set("vocab_size", c.vocab_size);
}

void read_decoder_fields(const HfConfigFields& f, DecoderConfigFile& c) {
  f.text("model_type", &c.model_type);
  for (const auto& [key, out] :
       {std::pair{"num_hidden_layers", &c.num_hidden_layers}, std::pair{"hidden_size", &c.hidden_size},
        std::pair{"num_attention_heads", &c.num_attention_heads}, std::pair{"intermediate_size", &c.intermediate_size},
        std::pair{"vocab_size", &c.vocab_size}, std::pair{"max_position_embeddings", &c.max_position_embeddings}})
    *out = f.positive(key).value_or(0);
  c.num_key_value_heads = f.positive("num_key_value_heads");
  f.text("hidden_act", &c.hidden_act);
  f.number("rms_norm_eps", &c.rms_norm_eps);
  f.number("rope_theta", &c.rope_theta);
  if (const std::optional<HfConfigFields> scaling = f.object("rope_scaling"))
    c.rope_scaling = rope_scaling_fields(*scaling);
  f.flag("tie_word_embeddings", &c.tie_word_embeddings);
  f.number("attention_dropout", &c.attention_dropout);
  c.bos_token_id = f.integer("bos_token_id");
  c.eos_token_id = f.integer("eos_token_id");
}

}  // namespace tptrain::io
