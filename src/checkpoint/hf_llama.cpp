#include "src/checkpoint/hf_llama.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "io/hf_llama_config.hpp"
#include "io/path_text.hpp"
#include "src/model/spec/sublayer_kinds.hpp"

namespace tptrain::checkpoint {

namespace {

// Two configs' ε or θ: the same number, up to the last digits of a decimal round trip.
bool same(double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b)); }

// The scaled rotary kinds' deck keys (src/model/spec/llama3_rope_kind.hpp, yarn_rope_kind.hpp) as
// Hugging Face's rope_scaling fields.
constexpr std::pair<const char*, const char*> kRopeScalingFields[] = {
    {"rope_factor", "factor"},
    {"rope_low_freq_factor", "low_freq_factor"},
    {"rope_high_freq_factor", "high_freq_factor"},
    {"rope_original_max_positions", "original_max_position_embeddings"},
    {"rope_beta_fast", "beta_fast"},
    {"rope_beta_slow", "beta_slow"},
    {"rope_mscale", "mscale"},
    {"rope_mscale_all_dim", "mscale_all_dim"},
};
const char* hf_rope_field(std::string_view deck_key) {
  for (const auto& [key, field] : kRopeScalingFields)
    if (deck_key == key) return field;
  return nullptr;
}
// YaRN's magnitudes left out are Hugging Face's None: the deck's 0.
bool given_in_hf(std::string_view deck_key, double value) {
  return value != 0 || (deck_key != "rope_mscale" && deck_key != "rope_mscale_all_dim");
}

// Whether `kind` is a rotary kind other than plain RoPE: one rope_scaling describes.
bool scaled_rotary(const model::SublayerKind* kind) {
  return kind != nullptr && kind->rotary.inverse != nullptr && kind != &model::kRope;
}

// rope_scaling of shape s's rotary kind; nullopt for unscaled RoPE.
std::optional<io::RopeScalingFile> rope_scaling_of(const model::GptShape& s) {
  const model::SublayerKind& kind = model::position_kind(s);
  if (!scaled_rotary(&kind)) return std::nullopt;
  io::RopeScalingFile r;
  r.rope_type = kind.name;
  for (const model::KindKey& k : kind.keys)
    if (const char* field = hf_rope_field(k.key); field != nullptr && given_in_hf(k.key, model::kind_key_value(k, s)))
      r.numbers[field] = model::kind_key_value(k, s);
  return r;
}

// rope_scaling read back into the rotary kind and its keys' values (h.position, h.rope_keys), each
// field checked: a type tptrain has, the fields that type requires, none it does not model.
void read_rope_scaling(const io::RopeScalingFile& r, int max_positions, HfLlamaConfig& h,
                       const std::function<void(const std::string&)>& fail) {
  const std::string type = r.rope_type.empty() ? std::string("(none)") : "\"" + r.rope_type + "\"";
  if (r.rope_type == "default") return;  // Hugging Face's name of unscaled RoPE
  const model::SublayerKind* kind = model::kind_named(model::SublayerSlot::position, r.rope_type);
  if (!scaled_rotary(kind))
    fail("rope_scaling's rope_type is " + type +
         ": tptrain's scaled rotary kinds are \"llama3\" (Llama 3.1) and \"yarn\" (YaRN, DeepSeek-V3); a config "
         "without rope_scaling (or \"default\") is plain RoPE");
  for (const std::string& other : r.others) {
    const bool numeric = std::any_of(std::begin(kRopeScalingFields), std::end(kRopeScalingFields),
                                     [&](const auto& f) { return other == f.second; });
    fail("rope_scaling." + other + (numeric ? " is not a number" : " is not modelled by tptrain's " + type));
  }
  if (r.truncate && !*r.truncate)
    fail("rope_scaling.truncate = false: tptrain's yarn rounds the ramp's ends outwards (truncate true)");
  for (const auto& [field, value] : r.numbers) {
    const std::string& name = field;  // a lambda captures no structured binding before C++20
    const bool known = std::any_of(kind->keys.begin(), kind->keys.end(), [&](const model::KindKey& k) {
      const char* f = hf_rope_field(k.key);
      return f != nullptr && name == f;
    });
    if (!known)
      fail(fmt::format("rope_scaling.{} = {}: tptrain's {} scaling has no such field{}", field, value, type,
                       field == "attention_factor" ? " (it derives the attention factor from mscale and mscale_all_dim)"
                                                   : ""));
  }
  h.position = kind->name;
  for (const model::KindKey& k : kind->keys) {
    const char* field = hf_rope_field(k.key);
    if (field == nullptr) continue;
    const auto at = r.numbers.find(field);
    double value = k.default_value;
    if (at != r.numbers.end()) value = at->second;
    else if (std::string_view(field) == "original_max_position_embeddings" && h.position == "yarn") value = max_positions;
    else if (h.position == "llama3" || std::string_view(field) == "factor")
      fail(fmt::format("rope_scaling has no {}: a {} scaling gives it (the deck's model.{})", field, type, k.key));
    if (k.integer != nullptr && (value != std::floor(value) || value < 1 || value > INT32_MAX))
      fail(fmt::format("rope_scaling.{} = {}: expected a positive integer", field, value));
    h.rope_keys[k.key] = value;
  }
  // Hugging Face's YaRN reads the factor from max_position_embeddings / original_max_position_embeddings
  // when the latter is given (newer versions) or from rope_scaling's factor (older ones): a config where
  // they differ computes two functions.
  const auto original = r.numbers.find("original_max_position_embeddings");
  if (h.position == "yarn" && original != r.numbers.end() &&
      !same(max_positions / original->second, h.rope_keys.at("rope_factor")))
    fail(fmt::format("max_position_embeddings / rope_scaling.original_max_position_embeddings = {} / {} differs from "
                     "rope_scaling.factor = {}: Hugging Face's versions read YaRN's factor from one or the other",
                     max_positions, original->second, h.rope_keys.at("rope_factor")));
}

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
  c.architecture = preset.architecture;
  c.model_type = preset.model_type;
  c.num_hidden_layers = s.layers;
  c.hidden_size = s.hidden;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_head_count();
  c.head_dim = s.head_dim();
  c.intermediate_size = s.ffn_hidden;
  c.vocab_size = s.vocab_size;
  c.max_position_embeddings = s.seq_length;
  c.rms_norm_eps = s.norm_eps;
  c.rope_theta = s.rope_theta;
  c.tie_word_embeddings = s.tie_embeddings;
  c.rope_scaling = rope_scaling_of(s);
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
  if (s.position == "yarn")
    c.max_position_embeddings = static_cast<int>(std::llround(s.rope_factor * s.rope_original_max_positions));
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
  if (c.model_type != preset.model_type)
    fail("model_type is " + (c.model_type.empty() ? std::string("missing") : "\"" + c.model_type + "\"") +
         fmt::format(": a model.architecture = \"{}\" deck imports {} models (model_type \"{}\")", preset.block_preset,
                     preset.architecture, preset.model_type));
  for (const auto& [key, value] :
       {std::pair{"num_hidden_layers", c.num_hidden_layers}, std::pair{"hidden_size", c.hidden_size},
        std::pair{"num_attention_heads", c.num_attention_heads}, std::pair{"intermediate_size", c.intermediate_size},
        std::pair{"vocab_size", c.vocab_size}})
    if (value == 0) fail(std::string("no ") + key);
  if (c.hidden_act != "silu")
    fail("hidden_act = \"" + c.hidden_act + "\": tptrain's SwiGLU uses silu, another activation would give another model");
  // LlamaConfig's bias switches (q, k, v and o; the MLP); Qwen2Config has none (q, k and v always).
  if (c.attention_bias) fail("attention_bias = true: tptrain's llama has no biases");
  if (c.mlp_bias) fail("mlp_bias = true: tptrain's llama has no biases");
  if (c.use_sliding_window)
    fail("use_sliding_window = true: tptrain's attention is causal over the whole sequence, without a window");
  if (c.rope_scaling && preset.config == HfConfigFamily::mixtral)
    fail("rope_scaling is set: tptrain's mixtral has unscaled rotary embeddings (MixtralConfig has no rope_scaling)");
  if (c.hidden_size % c.num_attention_heads != 0)
    fail(fmt::format("hidden_size = {} is not a multiple of num_attention_heads = {}", c.hidden_size,
                     c.num_attention_heads));
  if (c.head_dim && *c.head_dim != c.hidden_size / c.num_attention_heads)
    fail(fmt::format("head_dim = {}: tptrain's head dimension is hidden_size / num_attention_heads = {}", *c.head_dim,
                     c.hidden_size / c.num_attention_heads));
  HfLlamaConfig h;
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
  h.layers = c.num_hidden_layers;
  h.hidden = c.hidden_size;
  h.heads = c.num_attention_heads;
  h.kv_heads = c.num_key_value_heads.value_or(c.num_attention_heads);  // LlamaConfig's default
  h.ffn_hidden = c.intermediate_size;
  h.vocab_size = c.vocab_size;
  h.positions = c.max_position_embeddings;
  h.norm_eps = c.rms_norm_eps;
  h.rope_theta = c.rope_theta;
  h.tie_embeddings = c.tie_word_embeddings;
  if (c.rope_scaling) read_rope_scaling(*c.rope_scaling, c.max_position_embeddings, h, fail);
  return h;
}

std::string hf_config_mismatch(const HfLlamaConfig& h, const model::GptShape& s) {
  std::string out;
  const auto line = [&](const std::string& text) { out += (out.empty() ? "" : "\n") + text; };
  const auto compare = [&](const char* field, auto hf, const char* key, auto deck) {
    if (hf != deck) line(fmt::format("config.json {} = {}, the deck's {} = {}", field, hf, key, deck));
  };
  compare("num_hidden_layers", h.layers, "model.layers", s.layers);
  compare("hidden_size", h.hidden, "model.hidden", s.hidden);
  compare("num_attention_heads", h.heads, "model.heads", s.heads);
  compare("num_key_value_heads", h.kv_heads, "model.kv_heads", s.kv_head_count());
  compare("intermediate_size", h.ffn_hidden, "model.ffn_hidden", s.ffn_hidden);
  compare("vocab_size", h.vocab_size, "model.vocab_size", s.vocab_size);
  compare("tie_word_embeddings", h.tie_embeddings, "model.tie_embeddings", s.tie_embeddings);
  if (!same(h.norm_eps, s.norm_eps))
    line(fmt::format("config.json rms_norm_eps = {}, the deck's model.norm_eps = {}", h.norm_eps, s.norm_eps));
  if (!same(h.rope_theta, s.rope_theta))
    line(fmt::format("config.json rope_theta = {}, the deck's model.rope_theta = {}", h.rope_theta, s.rope_theta));
  if (h.position != s.position)
    line(fmt::format("config.json rope_scaling gives {} rotary positions, the deck's model.position = \"{}\"",
                     h.position == "rope" ? std::string("unscaled") : "\"" + h.position + "\"", s.position));
  else
    for (const model::KindKey& k : model::position_kind(s).keys)
      if (const auto at = h.rope_keys.find(k.key); at != h.rope_keys.end() && !same(at->second, model::kind_key_value(k, s)))
        line(fmt::format("config.json rope_scaling.{} = {}, the deck's model.{} = {}", hf_rope_field(k.key), at->second,
                         k.key, model::kind_key_text(k, s)));
  if (model::holds_experts(s)) {
    compare("num_local_experts", h.experts, "model.experts", s.experts);
    compare("num_experts_per_tok", h.experts_per_token, "model.experts_per_token", s.experts_per_token);
    if (const std::string routing = mixtral_routing_difference(s); !routing.empty())
      line("config.json routes as Mixtral (softmax over every expert, the top k renormalised), the deck's " + routing);
    if (const std::string experts = mixtral_experts_difference(s); !experts.empty())
      line("config.json's blocks each have routed experts of intermediate_size only (Mixtral), the deck's " + experts);
    // A window of W keys hides key j from query i when i − j >= W: never within S <= W tokens.
    if (h.sliding_window && *h.sliding_window < s.seq_length)
      line(fmt::format("config.json sliding_window = {} is shorter than the deck's model.seq_length = {}: tptrain's "
                       "attention is causal over the whole sequence, without a window",
                       *h.sliding_window, s.seq_length));
  }
  return out;
}

}  // namespace tptrain::checkpoint
