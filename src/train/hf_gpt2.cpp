#include "src/train/hf_gpt2.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <stdexcept>

#include "io/path_text.hpp"
#include "src/model/layer_norm.hpp"
#include "src/model/model_parameters.hpp"

namespace tptrain::train {

namespace {

// Checkpoint name (after layers/<i>/ for a block's) -> HF name (after transformer.h.<i>. for a
// block's), and whether HF holds the transpose (Conv1D weights).
struct Row {
  const char* checkpoint;
  const char* hf;
  bool transposed;
};
constexpr Row kModelRows[] = {
    {"embedding/word", "transformer.wte.weight", false},
    {"embedding/position", "transformer.wpe.weight", false},
    {"ln_f/weight", "transformer.ln_f.weight", false},
    {"ln_f/bias", "transformer.ln_f.bias", false},
};
constexpr Row kBlockRows[] = {
    {"ln_1/weight", "ln_1.weight", false},           {"ln_1/bias", "ln_1.bias", false},
    {"attn/qkv/weight", "attn.c_attn.weight", true},  {"attn/qkv/bias", "attn.c_attn.bias", false},
    {"attn/proj/weight", "attn.c_proj.weight", true}, {"attn/proj/bias", "attn.c_proj.bias", false},
    {"ln_2/weight", "ln_2.weight", false},           {"ln_2/bias", "ln_2.bias", false},
    {"mlp/fc/weight", "mlp.c_fc.weight", true},       {"mlp/fc/bias", "mlp.c_fc.bias", false},
    {"mlp/proj/weight", "mlp.c_proj.weight", true},   {"mlp/proj/bias", "mlp.c_proj.bias", false},
};

// [rows, cols] row-major -> its transpose [cols, rows].
std::vector<float> transpose(const std::vector<float>& x, std::uint64_t rows, std::uint64_t cols) {
  std::vector<float> y(x.size());
  for (std::uint64_t r = 0; r < rows; ++r)
    for (std::uint64_t c = 0; c < cols; ++c) y[c * rows + r] = x[r * cols + c];
  return y;
}

// GELU's tanh form under HF's names (transformers' ACT2FN): the function tptrain computes.
constexpr const char* kTanhGelu[] = {"gelu_new", "gelu_pytorch_tanh"};

}  // namespace

std::vector<std::uint64_t> HfTensor::hf_shape() const {
  if (!transposed) return checkpoint_shape;
  return {checkpoint_shape.at(1), checkpoint_shape.at(0)};
}

std::vector<HfTensor> hf_gpt2_tensors(const model::GptShape& shape) {
  std::vector<HfTensor> out;
  for (const model::LogicalTensor& t : model::logical_tensors(shape)) {
    HfTensor h;
    h.checkpoint_name = t.name;
    for (auto d : t.shape) h.checkpoint_shape.push_back(static_cast<std::uint64_t>(d));
    for (const Row& r : kModelRows)
      if (t.name == r.checkpoint) h.hf_name = r.hf, h.transposed = r.transposed;
    if (h.hf_name.empty() && t.name.rfind("layers/", 0) == 0) {
      const std::size_t slash = t.name.find('/', 7);
      const std::string layer = t.name.substr(7, slash - 7), rest = t.name.substr(slash + 1);
      for (const Row& r : kBlockRows)
        if (rest == r.checkpoint) h.hf_name = "transformer.h." + layer + "." + r.hf, h.transposed = r.transposed;
    }
    if (h.hf_name.empty())
      throw std::logic_error("tptrain: the model tensor " + t.name +
                             " has no Hugging Face name (src/train/hf_gpt2.cpp, kModelRows/kBlockRows)");
    if (h.transposed && h.checkpoint_shape.size() != 2)
      throw std::logic_error("tptrain: " + t.name + " is transposed for Hugging Face but is not a matrix");
    out.push_back(std::move(h));
  }
  return out;
}

std::vector<float> to_hf(const HfTensor& t, const std::vector<float>& checkpoint_values) {
  if (!t.transposed) return checkpoint_values;
  return transpose(checkpoint_values, t.checkpoint_shape[0], t.checkpoint_shape[1]);
}

std::vector<float> from_hf(const HfTensor& t, const std::vector<float>& hf_values) {
  if (!t.transposed) return hf_values;
  return transpose(hf_values, t.checkpoint_shape[1], t.checkpoint_shape[0]);
}

std::string hf_gpt2_config(const model::GptShape& s, bool gpt2_vocabulary) {
  nlohmann::ordered_json c;
  c["architectures"] = {"GPT2LMHeadModel"};
  c["model_type"] = "gpt2";
  c["vocab_size"] = s.vocab_size;
  c["n_positions"] = s.seq_length;
  c["n_ctx"] = s.seq_length;  // the older name, still read by some tools
  c["n_embd"] = s.hidden;
  c["n_layer"] = s.layers;
  c["n_head"] = s.heads;
  c["n_inner"] = s.ffn_hidden;
  c["activation_function"] = kTanhGelu[0];
  c["layer_norm_epsilon"] = model::LayerNorm<float>::eps;
  c["initializer_range"] = 0.02;
  // tptrain trains without dropout; HF's defaults (0.1) would train the export differently.
  c["resid_pdrop"] = 0.0;
  c["embd_pdrop"] = 0.0;
  c["attn_pdrop"] = 0.0;
  c["scale_attn_weights"] = true;
  c["scale_attn_by_inverse_layer_idx"] = false;
  c["reorder_and_upcast_attn"] = false;
  c["tie_word_embeddings"] = true;
  c["use_cache"] = true;
  if (gpt2_vocabulary) {
    c["bos_token_id"] = 50256;
    c["eos_token_id"] = 50256;
  }
  c["torch_dtype"] = "float32";
  return c.dump(2) + "\n";
}

HfGpt2Config read_hf_gpt2_config(const std::string& path) {
  const auto fail = [&](const std::string& what) {
    throw std::runtime_error("Hugging Face config " + io::display_path(path) + ": " + what);
  };
  std::ifstream in(path);
  if (!in) fail("cannot be read");
  nlohmann::json c;
  try {
    c = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("not valid JSON: ") + e.what());
  }
  if (!c.is_object()) fail("not a JSON object");
  if (c.value("model_type", std::string()) != "gpt2")
    fail("model_type is " + (c.contains("model_type") ? c["model_type"].dump() : std::string("missing")) +
         ": tptrain imports GPT-2 models (model_type \"gpt2\")");
  const auto integer = [&](const char* key, int* out) {
    if (!c.contains(key)) fail(std::string("no ") + key);
    const nlohmann::json& v = c[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > model::GptShape::int_limit)
      fail(std::string(key) + " = " + v.dump() + ": expected a positive integer");
    *out = v.get<int>();
  };
  HfGpt2Config h;
  integer("n_layer", &h.n_layer);
  integer("n_embd", &h.n_embd);
  integer("n_head", &h.n_head);
  integer("vocab_size", &h.vocab_size);
  integer("n_positions", &h.n_positions);
  if (!c.contains("n_inner") || c["n_inner"].is_null())
    h.n_inner = 4 * h.n_embd;  // GPT2Config's default
  else
    integer("n_inner", &h.n_inner);
  const std::string activation = c.value("activation_function", std::string(kTanhGelu[0]));
  if (activation != kTanhGelu[0] && activation != kTanhGelu[1])
    fail("activation_function = \"" + activation +
         "\": tptrain computes GELU's tanh form (\"gelu_new\" or \"gelu_pytorch_tanh\"), another activation would "
         "give another model");
  if (c.contains("layer_norm_epsilon")) {
    const nlohmann::json& eps = c["layer_norm_epsilon"];
    if (!eps.is_number() || std::abs(eps.get<double>() - model::LayerNorm<float>::eps) > 1e-12)
      fail(fmt::format("layer_norm_epsilon = {}: tptrain's LayerNorm uses {}", eps.dump(), model::LayerNorm<float>::eps));
  }
  const auto flag = [&](const char* key, bool expected, const char* why) {
    if (c.contains(key) && (!c[key].is_boolean() || c[key].get<bool>() != expected))
      fail(std::string(key) + " = " + c[key].dump() + ": " + why);
  };
  flag("tie_word_embeddings", true, "tptrain's output layer is the word embedding (tied)");
  flag("scale_attn_weights", true, "tptrain scales attention scores by 1/sqrt(head_dim)");
  flag("scale_attn_by_inverse_layer_idx", false, "tptrain does not scale attention by the layer index");
  flag("add_cross_attention", false, "tptrain's GPT-2 has no cross-attention");
  return h;
}

std::string hf_config_mismatch(const HfGpt2Config& h, const model::GptShape& s) {
  std::string out;
  const auto compare = [&](const char* field, int hf, const char* key, int deck) {
    if (hf != deck)
      out += fmt::format("{}config.json {} = {}, the deck's {} = {}", out.empty() ? "" : "\n", field, hf, key, deck);
  };
  compare("n_layer", h.n_layer, "model.layers", s.layers);
  compare("n_embd", h.n_embd, "model.hidden", s.hidden);
  compare("n_head", h.n_head, "model.heads", s.heads);
  compare("n_inner", h.n_inner, "model.ffn_hidden", s.ffn_hidden);
  compare("vocab_size", h.vocab_size, "model.vocab_size", s.vocab_size);
  if (h.n_positions < s.seq_length)
    out += fmt::format("{}config.json n_positions = {} is less than the deck's model.seq_length = {}",
                       out.empty() ? "" : "\n", h.n_positions, s.seq_length);
  return out;
}

}  // namespace tptrain::train
