// The block specification (docs/design.md, "The block specification"): the choices a transformer
// block is made of, as a value — what Megatron-Core's TransformerConfig holds (normalization,
// gated_linear_unit, add_bias_linear, position_embedding_type, num_query_groups). An architecture
// (model.architecture) is a named preset of it; the deck may override each choice
// (model.norm, model.mlp, model.position, model.qkv_bias, model.linear_bias).
//
// Plain data, no Kokkos, no MPI: the deck (io/) resolves its keys from it, the model (src/model/)
// derives its parameter and buffer rows, FLOPs and Hugging Face names from it, the planner counts
// from it. Adding an architecture is a row of kBlockPresets (plus its Hugging Face preset,
// src/checkpoint/hf_presets.cpp, when it has one), a deck and tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "base/rules.hpp"

namespace tptrain::model {

enum class Norm { layernorm, rmsnorm };  // LayerNorm (weight and bias) or RMSNorm (weight)
// fc, GELU (tanh), proj; or gate|up, silu(gate)·up, down; or a mixture of SwiGLU experts, each
// token through k of E of them (Mixtral; src/model/mixture_of_experts.hpp)
enum class Mlp { gelu, swiglu, moe };
enum class Position { learned, rope };   // a learned [S, H] embedding added to the tokens, or q and k rotated

inline const char* norm_name(Norm n) { return n == Norm::rmsnorm ? "rmsnorm" : "layernorm"; }
inline const char* mlp_name(Mlp m) { return m == Mlp::moe ? "moe" : m == Mlp::swiglu ? "swiglu" : "gelu"; }
inline const char* position_name(Position p) { return p == Position::rope ? "rope" : "learned"; }
inline std::optional<Norm> norm_of(std::string_view s) {
  if (s == "layernorm") return Norm::layernorm;
  if (s == "rmsnorm") return Norm::rmsnorm;
  return std::nullopt;
}
inline std::optional<Mlp> mlp_of(std::string_view s) {
  if (s == "gelu") return Mlp::gelu;
  if (s == "swiglu") return Mlp::swiglu;
  if (s == "moe") return Mlp::moe;
  return std::nullopt;
}
inline std::optional<Position> position_of(std::string_view s) {
  if (s == "learned") return Position::learned;
  if (s == "rope") return Position::rope;
  return std::nullopt;
}

// LayerNorm's ε (GPT-2's; not a deck key: model.norm_eps is RMSNorm's).
inline constexpr double kLayerNormEps = 1e-5;

struct BlockSpec {
  std::string architecture = "gpt2";  // the preset it started from (model.architecture)
  Norm norm = Norm::layernorm;
  double norm_eps = 1e-5;             // the norm's ε (model.norm_eps)
  Mlp mlp = Mlp::gelu;
  Position position = Position::learned;
  double rope_theta = 10000.0;        // the rotary base θ (position = rope; model.rope_theta)
  bool qkv_bias = true;               // a bias on the QKV projection (model.qkv_bias)
  // Biases on the other projections (attention output, MLP) and on the norm when it has one
  // (LayerNorm): model.linear_bias.
  bool linear_bias = true;
  int kv_heads = 0;                   // key/value heads (grouped-query attention); 0 stands for heads
  bool tie_embeddings = true;         // the output layer is the word embedding, or its own lm_head/weight
  // GPT-2 scales the residual projections' initial values by 1/√(2L) (Radford et al. 2019, 2.3);
  // Hugging Face's Llama initialises every matrix with the same σ. A preset's choice.
  bool scaled_residual_init = true;
  // The mixture of experts (mlp = moe; Mixtral, Jiang et al. 2024): E SwiGLU experts of
  // ffn_hidden each (model.experts), k of them per token (model.experts_per_token), chosen by a
  // router and weighted by its softmax renormalised over the k. Dropless unless a capacity factor
  // c > 0 (model.moe_capacity_factor) caps each expert at ceil(c·k·N/E) of a micro-batch's N tokens.
  int experts = 8;
  int experts_per_token = 2;
  double moe_capacity_factor = 0.0;
  // The weights of its load-balancing loss and router z-loss in the training loss
  // (training.moe_aux_loss_coeff, training.moe_z_loss_coeff); 0: they add no gradient.
  double moe_aux_loss_coeff = 0.0;
  double moe_z_loss_coeff = 0.0;

  bool rms() const { return norm == Norm::rmsnorm; }
  bool swiglu() const { return mlp == Mlp::swiglu; }  // the dense SwiGLU MLP
  bool moe() const { return mlp == Mlp::moe; }
  bool gated() const { return mlp != Mlp::gelu; }      // gate|up, silu(gate)·up: SwiGLU, or each expert
  bool rotary() const { return position == Position::rope; }
  bool norm_bias() const { return norm == Norm::layernorm; }
};

// The named architectures. Their fields are the defaults of the deck's keys.
struct BlockPreset {
  const char* name;
  const char* what;  // for the key table and messages
  BlockSpec spec;
};

inline BlockSpec make_spec(const char* name, Norm norm, Mlp mlp, Position position, bool qkv_bias, bool linear_bias,
                           bool tie_embeddings, bool scaled_residual_init) {
  BlockSpec s;
  s.architecture = name;
  s.norm = norm;
  s.mlp = mlp;
  s.position = position;
  s.qkv_bias = qkv_bias;
  s.linear_bias = linear_bias;
  s.tie_embeddings = tie_embeddings;
  s.scaled_residual_init = scaled_residual_init;
  return s;
}

inline const BlockPreset* block_presets(std::size_t& count) {
  static const BlockPreset presets[] = {
      {"gpt2", "LayerNorm, biases, GELU, learned positions, tied head (GPT2LMHeadModel)",
       make_spec("gpt2", Norm::layernorm, Mlp::gelu, Position::learned, true, true, true, true)},
      {"llama", "RMSNorm, no biases, SwiGLU, rotary positions, grouped-query attention, untied head (LlamaForCausalLM)",
       make_spec("llama", Norm::rmsnorm, Mlp::swiglu, Position::rope, false, false, false, false)},
      {"qwen2", "llama with q/k/v biases (Qwen2ForCausalLM)",
       make_spec("qwen2", Norm::rmsnorm, Mlp::swiglu, Position::rope, true, false, false, false)},
      {"mixtral", "llama with a mixture of SwiGLU experts as its MLP, top-k routed (MixtralForCausalLM)",
       make_spec("mixtral", Norm::rmsnorm, Mlp::moe, Position::rope, false, false, false, false)},
  };
  count = sizeof(presets) / sizeof(presets[0]);
  return presets;
}

// The preset `name`, or nullptr.
inline const BlockPreset* block_preset(std::string_view name) {
  std::size_t n = 0;
  const BlockPreset* p = block_presets(n);
  for (std::size_t i = 0; i < n; ++i)
    if (name == p[i].name) return &p[i];
  return nullptr;
}

// "gpt2", "llama", "qwen2": the names model.architecture takes, comma-separated (messages).
inline std::string block_preset_names() {
  std::size_t n = 0;
  const BlockPreset* p = block_presets(n);
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += (i ? ", " : "") + std::string("\"") + p[i].name + "\"";
  return out;
}

// The specification's own rules (base/rules.hpp), stated once: the deck reports them at the
// keys' places, GptShape::validate throws them. Each takes only the choices it binds, so that
// the deck can ask it as soon as those keys are valid.

// Rotary embeddings rotate pairs of features: the head dimension hidden / heads must be even.
inline std::vector<rules::Problem> rotary_problems(Position position, std::int64_t hidden, std::int64_t heads) {
  if (position != Position::rope || heads < 1 || hidden % heads != 0 || (hidden / heads) % 2 == 0) return {};
  return {rules::Problem::statement(
      {"model.heads", heads},
      fmt::format("an even head dimension with {{model.position}}: rotary embeddings rotate pairs of features, "
                  "and model.hidden / model.heads = {} / {} = {} is odd",
                  hidden, heads, hidden / heads),
      {{"model.position", 0, "\"rope\""}})};
}

// LayerNorm carries a bias β: a block without biases uses RMSNorm. Reported on
// model.linear_bias, which may be the preset's.
inline std::vector<rules::Problem> norm_bias_problems(Norm norm, bool linear_bias) {
  if (norm != Norm::layernorm || linear_bias) return {};
  return {rules::Problem::statement({"model.linear_bias", 0, "false"},
                                    "true with {model.norm}: LayerNorm carries a bias; a block without biases "
                                    "uses model.norm = \"rmsnorm\"",
                                    {{"model.norm", 0, "\"layernorm\""}})};
}

// model.norm_eps is RMSNorm's (LayerNorm uses 1e-5) and model.rope_theta rotary's: with the
// other choice each stays at its default, so that a resolved deck loads again.
inline std::vector<rules::Problem> unused_choice_problems(Norm norm, double norm_eps, Position position,
                                                          double rope_theta) {
  std::vector<rules::Problem> out;
  const BlockSpec defaults;
  if (norm != Norm::rmsnorm && norm_eps != defaults.norm_eps)
    out.push_back(rules::Problem::statement({"model.norm_eps", 0, fmt::format("{}", norm_eps)},
                                            "to be left out with {model.norm}: LayerNorm uses 1e-5; model.norm_eps "
                                            "is RMSNorm's",
                                            {{"model.norm", 0, fmt::format("\"{}\"", norm_name(norm))}}));
  if (position != Position::rope && rope_theta != defaults.rope_theta)
    out.push_back(rules::Problem::statement({"model.rope_theta", 0, fmt::format("{}", rope_theta)},
                                            "to be left out with {model.position}: learned positions have no "
                                            "rotary base",
                                            {{"model.position", 0, fmt::format("\"{}\"", position_name(position))}}));
  return out;
}

// The mixture of experts: k of E experts per token (1 <= k <= E); its experts have no biases;
// model.experts, model.experts_per_token and model.moe_capacity_factor are its keys, left at their
// defaults by the other MLPs (as norm_eps and rope_theta above).
inline std::vector<rules::Problem> moe_problems(Mlp mlp, bool linear_bias, std::int64_t experts,
                                                std::int64_t experts_per_token, double capacity_factor) {
  std::vector<rules::Problem> out;
  const BlockSpec defaults;
  if (mlp != Mlp::moe) {
    const auto unused = [&](const char* key, std::string value) {
      out.push_back(rules::Problem::statement({key, 0, std::move(value)},
                                              "to be left out with {model.mlp}: it is the mixture of experts' "
                                              "(model.mlp = \"moe\")",
                                              {{"model.mlp", 0, fmt::format("\"{}\"", mlp_name(mlp))}}));
    };
    if (experts != defaults.experts) unused("model.experts", std::to_string(experts));
    if (experts_per_token != defaults.experts_per_token)
      unused("model.experts_per_token", std::to_string(experts_per_token));
    if (capacity_factor != defaults.moe_capacity_factor)
      unused("model.moe_capacity_factor", fmt::format("{}", capacity_factor));
    return out;
  }
  if (experts_per_token > experts)
    out.push_back(rules::Problem::statement({"model.experts_per_token", experts_per_token},
                                            fmt::format("at most model.experts = {}: each token goes to k "
                                                        "different experts",
                                                        experts)));
  if (linear_bias)
    out.push_back(rules::Problem::statement({"model.linear_bias", 0, "true"},
                                            "false with {model.mlp}: the experts have no biases (Mixtral)",
                                            {{"model.mlp", 0, "\"moe\""}}));
  return out;
}

// Every rule of the specification, for a block of `hidden` features in `heads` heads.
inline std::vector<rules::Problem> block_spec_problems(const BlockSpec& s, std::int64_t hidden, std::int64_t heads) {
  std::vector<rules::Problem> out = rotary_problems(s.position, hidden, heads);
  for (rules::Problem& p : moe_problems(s.mlp, s.linear_bias, s.experts, s.experts_per_token, s.moe_capacity_factor))
    out.push_back(std::move(p));
  for (rules::Problem& p : norm_bias_problems(s.norm, s.linear_bias)) out.push_back(std::move(p));
  for (rules::Problem& p : unused_choice_problems(s.norm, s.norm_eps, s.position, s.rope_theta))
    out.push_back(std::move(p));
  return out;
}

}  // namespace tptrain::model
