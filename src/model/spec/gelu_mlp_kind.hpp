// The GELU MLP (model.mlp = "gelu"; GPT-2): fc column-parallel H -> F, GELU (tanh), proj
// row-parallel F -> H. Its rows of the block descriptor; its forward and backward: gelu_mlp.hpp.
#pragma once

#include "src/model/spec/sublayer_kind.hpp"

namespace tptrain::model {

// name, shape, split, blocks, SP sum, decay, init, tied, block extents, needs, Hugging Face names
inline constexpr ParameterRow kGeluMlpParameters[] = {
    {"{place}/fc/weight", {ParameterDim::ffn, ParameterDim::hidden}, TensorSplit::column, 1, false, true,
     {Init::normal, 0.02f}, false, {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always,
     "gpt2^=transformer.h.{i}.mlp.c_fc.weight"},
    {"{place}/fc/bias", {ParameterDim::ffn}, TensorSplit::column, 1, false, false, {Init::constant, 0.0f}, false,
     {ParameterDim::none, ParameterDim::none, ParameterDim::none}, needs_linear_bias,
     "gpt2=transformer.h.{i}.mlp.c_fc.bias"},
    {"{place}/proj/weight", {ParameterDim::hidden, ParameterDim::ffn}, TensorSplit::row, 1, false, true,
     {Init::residual_normal, 0.02f}, false, {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always,
     "gpt2^=transformer.h.{i}.mlp.c_proj.weight"},
    {"{place}/proj/bias", {ParameterDim::hidden}, TensorSplit::replicated, 1, true, false, {Init::constant, 0.0f}, false,
     {ParameterDim::none, ParameterDim::none, ParameterDim::none}, needs_linear_bias,
     "gpt2=transformer.h.{i}.mlp.c_proj.bias "
     "llama=model.layers.{i}.mlp.down_proj.bias"},
};

inline constexpr BufferRow kGeluMlpBuffers[] = {
    {"/mlp.h", "fc output (GELU input)", {BufferDim::tokens, BufferDim::f_t}, Element::storage, Lifetime::saved},
    {"/mlp.sigmoid", "GELU sigmoid", {BufferDim::tokens, BufferDim::f_t}, Element::storage, Lifetime::saved},
    {"mlp.a", "MLP activation: GELU(h); in the backward its gradient (written over it)",
     {BufferDim::tokens, BufferDim::f_t}, Element::storage, Lifetime::scratch, false, always, ScratchPhase::mlp},
};

inline constexpr SublayerKind kGeluMlp{
    SublayerSlot::mlp, "gelu", "fc, GELU (tanh), proj (GPT-2)", kGeluMlpParameters, kGeluMlpBuffers, nullptr, {}, nullptr,
    {}, [](const ModelShape&) { return std::string("GELU"); }, false, {"gelu"}};

}  // namespace tptrain::model
