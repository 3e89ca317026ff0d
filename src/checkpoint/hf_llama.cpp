#include "src/checkpoint/hf_llama.hpp"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "io/hf_llama_config.hpp"
#include "io/path_text.hpp"
#include "src/model/spec/sublayer_kinds.hpp"

namespace tptrain::checkpoint {

namespace {

// Two configs' ε or θ: the same number, up to the last digits of a decimal round trip.
bool same(double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b)); }

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
  if (c.rope_scaling)
    fail("rope_scaling is set: tptrain's rotary embeddings are unscaled (rope_scaling null), as Llama 2's and the base "
         "Llama 3's");
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
  if (model::holds_experts(s)) {
    compare("num_local_experts", h.experts, "model.experts", s.experts);
    compare("num_experts_per_tok", h.experts_per_token, "model.experts_per_token", s.experts_per_token);
    // A window of W keys hides key j from query i when i − j >= W: never within S <= W tokens.
    if (h.sliding_window && *h.sliding_window < s.seq_length)
      line(fmt::format("config.json sliding_window = {} is shorter than the deck's model.seq_length = {}: tptrain's "
                       "attention is causal over the whole sequence, without a window",
                       *h.sliding_window, s.seq_length));
  }
  return out;
}

}  // namespace tptrain::checkpoint
