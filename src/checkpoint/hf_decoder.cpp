#include "src/checkpoint/hf_decoder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <utility>

#include "src/model/spec/sublayer_kinds.hpp"

namespace tptrain::checkpoint {

bool hf_same_number(double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b)); }

namespace {

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

// rope_scaling read back into the rotary kind and its keys' values (h.position, h.rope_keys).
void read_rope_scaling(const io::RopeScalingFile& r, int max_positions, HfDecoderConfig& h,
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
      !hf_same_number(max_positions / original->second, h.rope_keys.at("rope_factor")))
    fail(fmt::format("max_position_embeddings / rope_scaling.original_max_position_embeddings = {} / {} differs from "
                     "rope_scaling.factor = {}: Hugging Face's versions read YaRN's factor from one or the other",
                     max_positions, original->second, h.rope_keys.at("rope_factor")));
}

}  // namespace

void set_hf_decoder_fields(io::DecoderConfigFile& c, const model::GptShape& s, const HfPreset& preset) {
  c.architecture = preset.architecture;
  c.model_type = preset.model_type;
  c.num_hidden_layers = s.layers;
  c.hidden_size = s.hidden;
  c.num_attention_heads = s.heads;
  c.intermediate_size = s.ffn_hidden;
  c.vocab_size = s.vocab_size;
  c.max_position_embeddings = s.position == "yarn"
                                  ? static_cast<int>(std::llround(s.rope_factor * s.rope_original_max_positions))
                                  : s.seq_length;
  c.rms_norm_eps = s.norm_eps;
  c.rope_theta = s.rope_theta;
  c.rope_scaling = rope_scaling_of(s);
  c.tie_word_embeddings = s.tie_embeddings;
}

HfDecoderConfig read_hf_decoder_fields(const io::DecoderConfigFile& c, const HfPreset& preset,
                                       const std::function<void(const std::string&)>& fail) {
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
  if (c.rope_scaling && preset.config == HfConfigFamily::mixtral)
    fail(fmt::format("rope_scaling is set: tptrain's {} has unscaled rotary embeddings ({}'s config has no rope_scaling)",
                     preset.block_preset, preset.architecture));
  HfDecoderConfig h;
  h.layers = c.num_hidden_layers;
  h.hidden = c.hidden_size;
  h.heads = c.num_attention_heads;
  h.ffn_hidden = c.intermediate_size;
  h.vocab_size = c.vocab_size;
  h.norm_eps = c.rms_norm_eps;
  h.rope_theta = c.rope_theta;
  h.tie_embeddings = c.tie_word_embeddings;
  if (c.rope_scaling) read_rope_scaling(*c.rope_scaling, c.max_position_embeddings, h, fail);
  return h;
}

void hf_decoder_mismatch(const HfDecoderConfig& h, const model::GptShape& s, HfMismatch& m) {
  m.compare("num_hidden_layers", h.layers, "model.layers", s.layers);
  m.compare("hidden_size", h.hidden, "model.hidden", s.hidden);
  m.compare("num_attention_heads", h.heads, "model.heads", s.heads);
  m.compare("vocab_size", h.vocab_size, "model.vocab_size", s.vocab_size);
  m.compare("tie_word_embeddings", h.tie_embeddings, "model.tie_embeddings", s.tie_embeddings);
  m.compare_number("rms_norm_eps", h.norm_eps, "model.norm_eps", s.norm_eps);
  m.compare_number("rope_theta", h.rope_theta, "model.rope_theta", s.rope_theta);
  if (h.position != s.position)
    m.line(fmt::format("config.json rope_scaling gives {} rotary positions, the deck's model.position = \"{}\"",
                       h.position == "rope" ? std::string("unscaled") : "\"" + h.position + "\"", s.position));
  else
    for (const model::KindKey& k : model::position_kind(s).keys)
      if (const auto at = h.rope_keys.find(k.key);
          at != h.rope_keys.end() && !hf_same_number(at->second, model::kind_key_value(k, s)))
        m.line(fmt::format("config.json rope_scaling.{} = {}, the deck's model.{} = {}", hf_rope_field(k.key),
                           at->second, k.key, model::kind_key_text(k, s)));
}

}  // namespace tptrain::checkpoint
