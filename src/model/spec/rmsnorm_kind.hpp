// RMSNorm (model.norm = "rmsnorm"; Zhang & Sennrich 2019, Llama): y = x / rms(x) · weight over
// each row's H features, ε model.norm_eps. Its rows at each norm place of the model; its forward
// and backward: src/model/rms_norm.hpp.
#pragma once

#include <string>

#include <fmt/format.h>

#include "src/model/spec/sublayer_kind.hpp"

namespace tptrain::model {

inline constexpr ParameterRow kRmsNormParameters[] = {
    // name, shape, split, blocks, SP sum, decay, init, tied, block extents, needs, Hugging Face names
    {"{place}/weight", {ParameterDim::hidden}, TensorSplit::replicated, 1, true, false, {Init::constant, 1.0f}, false,
     {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always,
     "gpt2={module}.weight llama={module}.weight deepseek={module}.weight"},
};

inline constexpr BufferRow kRmsNormBuffers[] = {
    {"/{place}.rstd", "{place} 1/rms", {BufferDim::residual_rows}, Element::fp32, Lifetime::saved},
};

inline constexpr KindKey kRmsNormKeys[] = {
    {"model", "norm_eps", 1e-5, 0.0, false, "", "RMSNorm's epsilon (model.norm = \"rmsnorm\"; LayerNorm uses 1e-5 always)",
     "LayerNorm uses 1e-5; model.norm_eps is RMSNorm's", nullptr, &ModelShape::norm_eps, 1.0},
};

inline constexpr SublayerKind kRmsNorm{SublayerSlot::norm,
                                       "rmsnorm",
                                       "RMSNorm: weight, epsilon model.norm_eps (Llama)",
                                       kRmsNormParameters,
                                       kRmsNormBuffers,
                                       nullptr,
                                       kRmsNormKeys,
                                       nullptr,
                                       {},
                                       [](const ModelShape& s) { return fmt::format("RMSNorm eps {:g}", s.norm_eps); }};

}  // namespace tptrain::model
