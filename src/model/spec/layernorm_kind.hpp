// LayerNorm (model.norm = "layernorm"; Ba et al. 2016, GPT-2): y = (x − mean) / σ · weight + bias
// over each row's H features, ε 1e-5. Its rows at each norm place of the model (the block's ln_1,
// ln_2; the head's ln_f); its forward and backward: src/model/layer_norm.hpp.
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/model/spec/sublayer_kind.hpp"

namespace tptrain::model {

// LayerNorm's ε (GPT-2's; not a deck key: model.norm_eps is RMSNorm's).
inline constexpr double kLayerNormEps = 1e-5;

// Replicated on every tensor rank; with sequence parallelism each rank's gradient is its own
// tokens' part, summed over the group.
inline constexpr ParameterRow kLayerNormParameters[] = {
    // name, shape, split, blocks, SP sum, decay, init, tied, block extents, needs, Hugging Face names
    {"{place}/weight", {ParameterDim::hidden}, TensorSplit::replicated, 1, true, false, {Init::constant, 1.0f}, false,
     {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always,
     "gpt2={module}.weight llama={module}.weight deepseek={module}.weight"},
    {"{place}/bias", {ParameterDim::hidden}, TensorSplit::replicated, 1, true, false, {Init::constant, 0.0f}, false,
     {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always, "gpt2={module}.bias"},
};

inline constexpr BufferRow kLayerNormBuffers[] = {
    {"/{place}.mean", "{place} mean", {BufferDim::residual_rows}, Element::fp32, Lifetime::saved},
    {"/{place}.rstd", "{place} 1/σ", {BufferDim::residual_rows}, Element::fp32, Lifetime::saved},
};

// Its rule: it carries a bias β, so a block without biases uses RMSNorm. Reported on
// model.linear_bias, which may be the preset's.
inline std::vector<rules::Problem> layernorm_problems(const ModelShape& s) {
  if (s.linear_bias) return {};
  return {rules::Problem::statement({"model.linear_bias", 0, "false"},
                                    "true with {model.norm}: LayerNorm carries a bias; a block without biases "
                                    "uses model.norm = \"rmsnorm\"",
                                    {{"model.norm", 0, "\"layernorm\""}})};
}
inline constexpr const char* kLayerNormBinds[] = {"linear_bias"};

inline constexpr SublayerKind kLayerNorm{SublayerSlot::norm,
                                         "layernorm",
                                         "LayerNorm: weight and bias, epsilon 1e-5 (GPT-2)",
                                         kLayerNormParameters,
                                         kLayerNormBuffers,
                                         nullptr,
                                         {},
                                         layernorm_problems,
                                         kLayerNormBinds,
                                         [](const ModelShape&) { return fmt::format("LayerNorm eps {:g}", kLayerNormEps); }};

}  // namespace tptrain::model
