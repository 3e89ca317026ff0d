#include "src/checkpoint/hf_gpt2.hpp"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "io/hf_gpt2_config.hpp"
#include "io/path_text.hpp"
#include "src/model/spec/model_parameters.hpp"

namespace tptrain::checkpoint {

namespace {

// GELU's tanh form under HF's names (transformers' ACT2FN): the function tptrain computes.
constexpr const char* kTanhGelu[] = {"gelu_new", "gelu_pytorch_tanh"};

}  // namespace

std::string hf_gpt2_config(const model::GptShape& s, bool gpt2_vocabulary) {
  io::Gpt2ConfigFile c;
  c.model_type = "gpt2";
  c.vocab_size = s.vocab_size;
  c.n_positions = s.seq_length;
  c.n_embd = s.hidden;
  c.n_layer = s.layers;
  c.n_head = s.heads;
  c.n_inner = s.ffn_hidden;
  c.activation_function = kTanhGelu[0];
  c.layer_norm_epsilon = model::kLayerNormEps;
  // tptrain trains without dropout; HF's defaults (0.1) would train the export differently.
  c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
  c.tie_word_embeddings = s.tie_embeddings;
  if (gpt2_vocabulary) c.bos_token_id = c.eos_token_id = 50256;
  return io::gpt2_config_text(c);
}

HfGpt2Config read_hf_gpt2_config(const std::string& path) {
  const io::Gpt2ConfigFile c = io::read_gpt2_config(path);
  const auto fail = [&](const std::string& what) {
    throw std::runtime_error("Hugging Face config " + io::display_path(path) + ": " + what);
  };
  if (c.model_type != "gpt2")
    fail("model_type is " + (c.model_type.empty() ? std::string("missing") : "\"" + c.model_type + "\"") +
         ": a model.architecture = \"gpt2\" deck imports GPT-2 models (model_type \"gpt2\"; Llama models need a "
         "\"llama\" deck)");
  for (const auto& [key, value] : {std::pair{"n_layer", c.n_layer}, std::pair{"n_embd", c.n_embd}, std::pair{"n_head", c.n_head},
                                   std::pair{"vocab_size", c.vocab_size}, std::pair{"n_positions", c.n_positions}})
    if (value == 0) fail(std::string("no ") + key);
  if (c.activation_function != kTanhGelu[0] && c.activation_function != kTanhGelu[1])
    fail("activation_function = \"" + c.activation_function +
         "\": tptrain computes GELU's tanh form (\"gelu_new\" or \"gelu_pytorch_tanh\"), another activation would "
         "give another model");
  if (std::abs(c.layer_norm_epsilon - model::kLayerNormEps) > 1e-12)
    fail(fmt::format("layer_norm_epsilon = {}: tptrain's LayerNorm uses {}", c.layer_norm_epsilon,
                     model::kLayerNormEps));
  const auto flag = [&](const char* key, bool value, bool expected, const char* why) {
    if (value != expected) fail(fmt::format("{} = {}: {}", key, value, why));
  };
  flag("scale_attn_weights", c.scale_attn_weights, true, "tptrain scales attention scores by 1/sqrt(head_dim)");
  flag("scale_attn_by_inverse_layer_idx", c.scale_attn_by_inverse_layer_idx, false,
       "tptrain does not scale attention by the layer index");
  flag("add_cross_attention", c.add_cross_attention, false, "tptrain's GPT-2 has no cross-attention");
  HfGpt2Config h;
  h.n_layer = c.n_layer;
  h.n_embd = c.n_embd;
  h.n_head = c.n_head;
  h.vocab_size = c.vocab_size;
  h.n_positions = c.n_positions;
  h.n_inner = c.n_inner ? *c.n_inner : 4 * c.n_embd;  // GPT2Config's default
  h.tie_embeddings = c.tie_word_embeddings;
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
  if (h.tie_embeddings != s.tie_embeddings)
    out += fmt::format("{}config.json tie_word_embeddings = {}, the deck's model.tie_embeddings = {}", out.empty() ? "" : "\n",
                       h.tie_embeddings, s.tie_embeddings);
  if (h.n_positions < s.seq_length)
    out += fmt::format("{}config.json n_positions = {} is less than the deck's model.seq_length = {}",
                       out.empty() ? "" : "\n", h.n_positions, s.seq_length);
  return out;
}

}  // namespace tptrain::checkpoint
