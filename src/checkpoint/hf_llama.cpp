#include "src/checkpoint/hf_llama.hpp"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "io/hf_llama_config.hpp"
#include "io/path_text.hpp"
#include "src/checkpoint/hf_decoder.hpp"
#include "src/model/spec/sublayer_kinds.hpp"

namespace tptrain::checkpoint {

namespace {

// Where shape s's router is not Mixtral's (softmax over every expert, the top k renormalised,
// unscaled, no expert bias), which MixtralConfig cannot say: the deck's keys, or "".
std::string mixtral_routing_difference(const model::GptShape& s) {
  std::string out;
  const auto differs = [&](const char* key, const std::string& value) {
    out += fmt::format("{}{} = {}", out.empty() ? "" : ", ", key, value);
  };
  if (s.moe_score_function != "softmax") differs("model.moe_score_function", "\"" + s.moe_score_function + "\"");
  if (s.moe_groups != 1) differs("model.moe_groups", std::to_string(s.moe_groups));
  if (!s.moe_norm_topk_prob) differs("model.moe_norm_topk_prob", "false");
  if (s.moe_routed_scaling != 1.0) differs("model.moe_routed_scaling", fmt::format("{}", s.moe_routed_scaling));
  if (s.moe_bias_update_rate > 0)
    differs("training.moe_bias_update_rate", fmt::format("{} (an expert bias)", s.moe_bias_update_rate));
  return out;
}
// Where shape s's experts are not Mixtral's (E routed ones of intermediate_size in every block):
// the deck's keys, or "".
std::string mixtral_experts_difference(const model::GptShape& s) {
  std::string out;
  const auto differs = [&](const char* key, int value) {
    if (value != 0) out += fmt::format("{}{} = {}", out.empty() ? "" : ", ", key, value);
  };
  differs("model.moe_ffn_hidden", s.moe_ffn_hidden == s.ffn_hidden ? 0 : s.moe_ffn_hidden);
  differs("model.moe_shared_experts", s.moe_shared_experts);
  differs("model.moe_dense_layers", s.moe_dense_layers);
  return out;
}

}  // namespace

std::string hf_llama_config(const model::GptShape& s, const HfPreset& preset,
                            std::optional<double> router_aux_loss_coef) {
  io::LlamaConfigFile c;
  set_hf_decoder_fields(c, s, preset);
  c.num_key_value_heads = s.kv_head_count();
  c.head_dim = s.head_dim();
  if (c.rope_scaling && preset.config == HfConfigFamily::mixtral)
    throw std::runtime_error(fmt::format("model.position = \"{}\": {} has no rope_scaling (MixtralConfig), so no {} "
                                         "model with scaled rotary positions",
                                         s.position, preset.architecture, preset.architecture));
  if (preset.config == HfConfigFamily::mixtral) {
    if (const std::string routing = mixtral_routing_difference(s); !routing.empty())
      throw std::runtime_error(fmt::format("{}: {}'s router is a softmax over every expert, the top k renormalised "
                                           "and unscaled (MixtralConfig has no other)",
                                           routing, preset.architecture));
    if (const std::string experts = mixtral_experts_difference(s); !experts.empty())
      throw std::runtime_error(fmt::format("{}: {}'s blocks each have model.experts routed experts of "
                                           "intermediate_size, no shared or dense ones (MixtralConfig has no other)",
                                           experts, preset.architecture));
  }
  if (preset.config != HfConfigFamily::mixtral) return io::llama_config_text(c);
  c.num_local_experts = s.experts;
  c.num_experts_per_tok = s.experts_per_token;
  if (router_aux_loss_coef) c.router_aux_loss_coef = *router_aux_loss_coef;
  return io::mixtral_config_text(c);
}

HfLlamaConfig read_hf_llama_config(const std::string& path, const HfPreset& preset) {
  const io::LlamaConfigFile c = io::read_llama_config(path);
  const auto fail = [&](const std::string& what) {
    throw std::runtime_error("Hugging Face config " + io::display_path(path) + ": " + what);
  };
  HfLlamaConfig h;
  static_cast<HfDecoderConfig&>(h) = read_hf_decoder_fields(c, preset, fail);
  // LlamaConfig's bias switches (q, k, v and o; the MLP); Qwen2Config has none (q, k and v always).
  if (c.attention_bias) fail("attention_bias = true: tptrain's llama has no biases");
  if (c.mlp_bias) fail("mlp_bias = true: tptrain's llama has no biases");
  if (c.use_sliding_window)
    fail("use_sliding_window = true: tptrain's attention is causal over the whole sequence, without a window");
  if (c.hidden_size % c.num_attention_heads != 0)
    fail(fmt::format("hidden_size = {} is not a multiple of num_attention_heads = {}", c.hidden_size,
                     c.num_attention_heads));
  if (c.head_dim && *c.head_dim != c.hidden_size / c.num_attention_heads)
    fail(fmt::format("head_dim = {}: tptrain's head dimension is hidden_size / num_attention_heads = {}", *c.head_dim,
                     c.hidden_size / c.num_attention_heads));
  if (preset.config == HfConfigFamily::mixtral) {
    // MixtralConfig defaults them to Mixtral-8x7B's 8 and 2; a file that leaves them out names no
    // particular mixture (as one without hidden_size), so both must be there.
    if (!c.num_local_experts)
      fail("no num_local_experts: a MixtralForCausalLM config gives its experts per block (the deck's model.experts)");
    if (!c.num_experts_per_tok)
      fail("no num_experts_per_tok: a MixtralForCausalLM config gives the experts each token goes through (the "
           "deck's model.experts_per_token)");
    if (*c.num_experts_per_tok > *c.num_local_experts)
      fail(fmt::format("num_experts_per_tok = {} exceeds num_local_experts = {}: each token goes through k different "
                       "experts of the E",
                       *c.num_experts_per_tok, *c.num_local_experts));
    h.experts = *c.num_local_experts;
    h.experts_per_token = *c.num_experts_per_tok;
    h.sliding_window = c.sliding_window;
  }
  h.kv_heads = c.num_key_value_heads.value_or(c.num_attention_heads);  // LlamaConfig's default
  return h;
}

std::string hf_config_mismatch(const HfLlamaConfig& h, const model::GptShape& s) {
  HfMismatch m;
  hf_decoder_mismatch(h, s, m);
  m.compare("num_key_value_heads", h.kv_heads, "model.kv_heads", s.kv_head_count());
  m.compare("intermediate_size", h.ffn_hidden, "model.ffn_hidden", s.ffn_hidden);
  if (model::holds_experts(s)) {
    m.compare("num_local_experts", h.experts, "model.experts", s.experts);
    m.compare("num_experts_per_tok", h.experts_per_token, "model.experts_per_token", s.experts_per_token);
    if (const std::string routing = mixtral_routing_difference(s); !routing.empty())
      m.line("config.json routes as Mixtral (softmax over every expert, the top k renormalised), the deck's " + routing);
    if (const std::string experts = mixtral_experts_difference(s); !experts.empty())
      m.line("config.json's blocks each have routed experts of intermediate_size only (Mixtral), the deck's " + experts);
    // A window of W keys hides key j from query i when i − j >= W: never within S <= W tokens.
    if (h.sliding_window && *h.sliding_window < s.seq_length)
      m.line(fmt::format("config.json sliding_window = {} is shorter than the deck's model.seq_length = {}: tptrain's "
                         "attention is causal over the whole sequence, without a window",
                         *h.sliding_window, s.seq_length));
  }
  return m.text();
}

}  // namespace tptrain::checkpoint
