// Learned positions (model.position = "learned"; GPT-2): a [seq_length, H] embedding whose row p
// is added to the token of position p. Its row of the embedding; its forward and backward:
// src/model/learned_position.hpp.
#pragma once

#include <string>

#include "src/model/spec/sublayer_kind.hpp"

namespace tptrain::model {

// Replicated, added after the word embedding's reduction (vocab_parallel_embedding.hpp).
inline constexpr ParameterRow kLearnedPositionParameters[] = {
    // name, shape, split, blocks, SP sum, decay, init, tied, block extents, needs, Hugging Face names
    {"{place}/position", {ParameterDim::seq, ParameterDim::hidden}, TensorSplit::replicated, 1, false, true,
     {Init::normal, 0.01f}, false, {ParameterDim::none, ParameterDim::none, ParameterDim::none}, always,
     "gpt2=transformer.wpe.weight"},
};

inline constexpr SublayerKind kLearnedPosition{
    SublayerSlot::position, "learned", "a learned [seq_length, hidden] embedding added to the tokens (GPT-2)",
    kLearnedPositionParameters, {}, nullptr, {}, nullptr, {},
    [](const ModelShape&) { return std::string("learned positions"); }};

}  // namespace tptrain::model
