#include "io/hf_deepseek_config.hpp"

#include <utility>

#include "io/hf_config.hpp"

namespace tptrain::io {

std::string deepseek_v3_config_text(const DeepseekV3ConfigFile& c) {
  HfConfigWriter w;
  set_decoder_fields(w, c, true);
  w.set("attention_bias", c.attention_bias);
  w.set("first_k_dense_replace", c.first_k_dense_replace);
  w.set("kv_lora_rank", c.kv_lora_rank);
  w.set("moe_intermediate_size", c.moe_intermediate_size);
  w.set("n_group", c.n_group);
  w.set("n_routed_experts", c.n_routed_experts);
  w.set("n_shared_experts", c.n_shared_experts);
  w.set("norm_topk_prob", c.norm_topk_prob);
  w.set("num_experts_per_tok", c.num_experts_per_tok);
  w.set("num_nextn_predict_layers", c.num_nextn_predict_layers);
  w.set("q_lora_rank", c.q_lora_rank > 0 ? std::optional<int>(c.q_lora_rank) : std::nullopt);
  w.set("qk_nope_head_dim", c.qk_nope_head_dim);
  w.set("qk_rope_head_dim", c.qk_rope_head_dim);
  w.set("rope_interleave", c.rope_interleave);
  w.set("routed_scaling_factor", c.routed_scaling_factor);
  w.set("scoring_func", c.scoring_func);
  w.set("topk_group", c.topk_group);
  w.set("topk_method", c.topk_method);
  w.set("v_head_dim", c.v_head_dim);
  return w.sorted_text();
}

DeepseekV3ConfigFile read_deepseek_v3_config(const std::string& path) {
  const HfConfigFields f(path);
  DeepseekV3ConfigFile c;
  read_decoder_fields(f, c);
  for (const auto& [key, out] :
       {std::pair{"moe_intermediate_size", &c.moe_intermediate_size}, std::pair{"n_routed_experts", &c.n_routed_experts},
        std::pair{"num_experts_per_tok", &c.num_experts_per_tok}, std::pair{"kv_lora_rank", &c.kv_lora_rank},
        std::pair{"qk_rope_head_dim", &c.qk_rope_head_dim}, std::pair{"v_head_dim", &c.v_head_dim},
        std::pair{"qk_nope_head_dim", &c.qk_nope_head_dim}})
    *out = f.positive(key).value_or(0);
  if (f.has("q_lora_rank")) c.q_lora_rank = f.positive("q_lora_rank").value_or(0);
  c.head_dim = f.positive("head_dim");
  c.qk_head_dim = f.positive("qk_head_dim");
  for (const auto& [key, out] : {std::pair{"n_group", &c.n_group}, std::pair{"topk_group", &c.topk_group},
                                 std::pair{"moe_layer_freq", &c.moe_layer_freq}})
    *out = f.positive(key).value_or(*out);
  for (const auto& [key, out] : {std::pair{"n_shared_experts", &c.n_shared_experts},
                                 std::pair{"first_k_dense_replace", &c.first_k_dense_replace},
                                 std::pair{"num_nextn_predict_layers", &c.num_nextn_predict_layers}})
    *out = f.non_negative(key).value_or(*out);
  f.number("routed_scaling_factor", &c.routed_scaling_factor);
  f.flag("norm_topk_prob", &c.norm_topk_prob);
  f.text("scoring_func", &c.scoring_func);
  f.text("topk_method", &c.topk_method);
  f.flag("rope_interleave", &c.rope_interleave);
  f.flag("attention_bias", &c.attention_bias);
  if (const std::optional<HfConfigFields> q = f.object("quantization_config")) {
    DeepseekV3ConfigFile::Quantization& quantization = c.quantization.emplace();
    q->text("quant_method", &quantization.quant_method);
    q->text("fmt", &quantization.fmt);
    quantization.weight_block_size = q->positive_list("weight_block_size");
  }
  return c;
}

}  // namespace tptrain::io
