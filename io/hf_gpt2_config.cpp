#include "io/hf_gpt2_config.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <limits>

#include "io/path_text.hpp"

namespace tptrain::io {

std::string gpt2_config_text(const Gpt2ConfigFile& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["n_positions"] = c.n_positions;
  j["n_ctx"] = c.n_positions;  // the older name, still read by some tools
  j["n_embd"] = c.n_embd;
  j["n_layer"] = c.n_layer;
  j["n_head"] = c.n_head;
  if (c.n_inner)
    j["n_inner"] = *c.n_inner;
  else
    j["n_inner"] = nullptr;
  j["activation_function"] = c.activation_function;
  j["layer_norm_epsilon"] = c.layer_norm_epsilon;
  j["initializer_range"] = 0.02;
  j["resid_pdrop"] = c.resid_pdrop;
  j["embd_pdrop"] = c.embd_pdrop;
  j["attn_pdrop"] = c.attn_pdrop;
  j["scale_attn_weights"] = c.scale_attn_weights;
  j["scale_attn_by_inverse_layer_idx"] = c.scale_attn_by_inverse_layer_idx;
  j["reorder_and_upcast_attn"] = c.reorder_and_upcast_attn;
  j["add_cross_attention"] = c.add_cross_attention;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["use_cache"] = true;
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_id) j["eos_token_id"] = *c.eos_token_id;
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

Gpt2ConfigFile read_gpt2_config(const std::string& path) {
  const auto fail = [&](const std::string& what) {
    throw std::runtime_error("Hugging Face config " + display_path(path) + ": " + what);
  };
  std::ifstream in(path);
  if (!in) fail("cannot be read");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail("not a JSON object");
  Gpt2ConfigFile c;
  const auto positive = [&](const char* key, bool required) -> std::optional<int> {
    if (!j.contains(key)) {
      if (required) fail(std::string("no ") + key);
      return std::nullopt;
    }
    const nlohmann::json& v = j[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > std::numeric_limits<int>::max())
      fail(std::string(key) + " = " + v.dump() + ": expected a positive integer");
    return v.get<int>();
  };
  const auto text = [&](const char* key, std::string* out) {
    if (!j.contains(key)) return;
    if (!j[key].is_string()) fail(std::string(key) + " = " + j[key].dump() + ": expected a string");
    *out = j[key].get<std::string>();
  };
  const auto flag = [&](const char* key, bool* out) {
    if (!j.contains(key)) return;
    if (!j[key].is_boolean()) fail(std::string(key) + " = " + j[key].dump() + ": expected true or false");
    *out = j[key].get<bool>();
  };
  const auto number = [&](const char* key, double* out) {
    if (!j.contains(key)) return;
    if (!j[key].is_number()) fail(std::string(key) + " = " + j[key].dump() + ": expected a number");
    *out = j[key].get<double>();
  };
  text("model_type", &c.model_type);
  c.n_layer = positive("n_layer", false).value_or(0);
  c.n_embd = positive("n_embd", false).value_or(0);
  c.n_head = positive("n_head", false).value_or(0);
  c.vocab_size = positive("vocab_size", false).value_or(0);
  c.n_positions = positive("n_positions", false).value_or(0);
  if (j.contains("n_inner") && !j["n_inner"].is_null()) c.n_inner = positive("n_inner", true);
  text("activation_function", &c.activation_function);
  number("layer_norm_epsilon", &c.layer_norm_epsilon);
  flag("tie_word_embeddings", &c.tie_word_embeddings);
  flag("scale_attn_weights", &c.scale_attn_weights);
  flag("scale_attn_by_inverse_layer_idx", &c.scale_attn_by_inverse_layer_idx);
  flag("reorder_and_upcast_attn", &c.reorder_and_upcast_attn);
  flag("add_cross_attention", &c.add_cross_attention);
  number("resid_pdrop", &c.resid_pdrop);
  number("embd_pdrop", &c.embd_pdrop);
  number("attn_pdrop", &c.attn_pdrop);
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_token_id = j["bos_token_id"].get<int>();
  if (j.contains("eos_token_id") && j["eos_token_id"].is_number_integer()) c.eos_token_id = j["eos_token_id"].get<int>();
  return c;
}

}  // namespace tptrain::io
