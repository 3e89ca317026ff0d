// The squared-ReLU MLP (model.mlp = "relu2"; So et al. 2021, Primer, section 3; Nemotron-4): fc
// column-parallel H -> F, relu(h)², proj row-parallel F -> H. Its rows of the block descriptor;
// its forward and backward: relu2_mlp.hpp. No Hugging Face family holds it (export refuses it).
#pragma once

#include "src/model/spec/sublayer_kind.hpp"

namespace tptrain::model {

inline constexpr ParameterRow kRelu2MlpParameters[] = {
    {"{place}/fc/weight", {ParameterDim::ffn, ParameterDim::hidden}, TensorSplit::column, 1, false, true,
     {Init::normal, 0.02f}, false, {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always, ""},
    {"{place}/fc/bias", {ParameterDim::ffn}, TensorSplit::column, 1, false, false, {Init::constant, 0.0f}, false,
     {ParameterDim::none, ParameterDim::none, ParameterDim::none}, needs_linear_bias, ""},
    {"{place}/proj/weight", {ParameterDim::hidden, ParameterDim::ffn}, TensorSplit::row, 1, false, true,
     {Init::residual_normal, 0.02f}, false, {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always, ""},
    {"{place}/proj/bias", {ParameterDim::hidden}, TensorSplit::replicated, 1, true, false, {Init::constant, 0.0f}, false,
     {ParameterDim::none, ParameterDim::none, ParameterDim::none}, needs_linear_bias, ""},
};

inline constexpr BufferRow kRelu2MlpBuffers[] = {
    {"/mlp.h", "fc output (squared ReLU input)", {BufferDim::tokens, BufferDim::f_t}, Element::storage,
     Lifetime::saved},
    {"mlp.a", "MLP activation: relu(h)²; in the backward its gradient, then h's (written over it)",
     {BufferDim::tokens, BufferDim::f_t}, Element::storage, Lifetime::scratch, false, always, ScratchPhase::mlp},
};

inline constexpr SublayerKind kRelu2Mlp{
    SublayerSlot::mlp, "relu2", "fc, relu(h)², proj (Primer, Nemotron-4)", kRelu2MlpParameters, kRelu2MlpBuffers,
    nullptr, {}, nullptr, {}, [](const ModelShape&) { return std::string("squared ReLU"); }, false, {"relu2"}};

}  // namespace tptrain::model
