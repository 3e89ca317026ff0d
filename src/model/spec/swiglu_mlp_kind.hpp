// The SwiGLU MLP (model.mlp = "swiglu"; Shazeer 2020, Llama): gate|up column-parallel H -> 2F,
// silu(gate)·up, down row-parallel F -> H. Its rows of the block descriptor; its forward and
// backward: swiglu_mlp.hpp. Each expert of a mixture (moe_kind.hpp) is this MLP too.
#pragma once

#include "src/model/spec/sublayer_kind.hpp"

namespace tptrain::model {

// mlp/fc stacks [gate: F | up: F], each block split over the tensor ranks, so that a rank's gate
// and up rows are the same columns of the MLP.
inline constexpr ParameterRow kSwigluMlpParameters[] = {
    {"{place}/fc/weight", {ParameterDim::ffn2, ParameterDim::hidden}, TensorSplit::column, 2, false, true,
     {Init::normal, 0.02f}, false, {ParameterDim::ffn, ParameterDim::ffn, ParameterDim::none}, always,
     "llama=model.layers.{i}.mlp.gate_proj.weight|"
     "model.layers.{i}.mlp.up_proj.weight "
     "deepseek=model.layers.{i}.mlp.gate_proj.weight|"
     "model.layers.{i}.mlp.up_proj.weight"},
    {"{place}/fc/bias", {ParameterDim::ffn2}, TensorSplit::column, 2, false, false, {Init::constant, 0.0f}, false,
     {ParameterDim::ffn, ParameterDim::ffn, ParameterDim::none}, needs_linear_bias,
     "llama=model.layers.{i}.mlp.gate_proj.bias|"
     "model.layers.{i}.mlp.up_proj.bias"},
    {"{place}/proj/weight", {ParameterDim::hidden, ParameterDim::ffn}, TensorSplit::row, 1, false, true,
     {Init::residual_normal, 0.02f}, false, {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always,
     "llama=model.layers.{i}.mlp.down_proj.weight deepseek=model.layers.{i}.mlp.down_proj.weight"},
    {"{place}/proj/bias", {ParameterDim::hidden}, TensorSplit::replicated, 1, true, false, {Init::constant, 0.0f}, false,
     {ParameterDim::none, ParameterDim::none, ParameterDim::none}, needs_linear_bias,
     "gpt2=transformer.h.{i}.mlp.c_proj.bias "
     "llama=model.layers.{i}.mlp.down_proj.bias"},
};

inline constexpr BufferRow kSwigluMlpBuffers[] = {
    {"/mlp.h", "fc output: gate and up", {BufferDim::tokens, BufferDim::f2_t}, Element::storage, Lifetime::saved},
    {"mlp.a", "MLP activation: silu(gate)·up; in the backward its gradient (written over it)",
     {BufferDim::tokens, BufferDim::f_t}, Element::storage, Lifetime::scratch, false, always, ScratchPhase::mlp},
    {"mlp.dh", "gate and up's gradient", {BufferDim::tokens, BufferDim::f2_t}, Element::storage, Lifetime::scratch,
     false, always, ScratchPhase::mlp},
};

inline constexpr SublayerKind kSwigluMlp{SublayerSlot::mlp,
                                         "swiglu",
                                         "silu(gate) * up, down; gate and up of model.ffn_hidden each (Llama)",
                                         kSwigluMlpParameters,
                                         kSwigluMlpBuffers,
                                         nullptr,
                                         {},
                                         nullptr,
                                         {},
                                         [](const ModelShape&) { return std::string("SwiGLU"); },
                                         false,
                                         {"swiglu", true}};

}  // namespace tptrain::model
