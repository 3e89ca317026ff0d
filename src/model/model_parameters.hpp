// Every parameter of the model, in checkpoint order: the embedding's, each block's (the block
// descriptor, src/model/block_descriptor.hpp) and the head's — the one list the checkpoints'
// datasets (logical_tensors), the planner's counts and the layers' Parameters come from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model/block_descriptor.hpp"

namespace tptrain::model {

// On the first pipeline stage. The output layer is tied to the word embedding.
inline constexpr ParameterRow kEmbeddingParameters[] = {
    {"embedding/word", {ParameterDim::vocab, ParameterDim::hidden}, TensorSplit::column, 1, false, true,
     {Init::normal, 0.02f}, true},
    {"embedding/position", {ParameterDim::seq, ParameterDim::hidden}, TensorSplit::replicated, 1, false, true,
     {Init::normal, 0.01f}},
};
// On the last pipeline stage: the final LayerNorm.
inline constexpr ParameterRow kHeadParameters[] = {
    {"ln_f/weight", {ParameterDim::hidden}, TensorSplit::replicated, 1, true, false, {Init::constant, 1.0f}},
    {"ln_f/bias", {ParameterDim::hidden}, TensorSplit::replicated, 1, true, false, {Init::constant, 0.0f}},
};

// The parameter `name` of the embedding, of a block (block_parameter) or of the head.
inline ParameterSpec model_parameter(const GptShape& s, const std::string& name) {
  for (const ParameterRow& r : kEmbeddingParameters)
    if (name == r.name) return spec_of(r, s);
  for (const ParameterRow& r : kHeadParameters)
    if (name == r.name) return spec_of(r, s);
  return block_parameter(s, name);
}

// Name and logical (checkpoint) shape of every model tensor, in checkpoint order: what the
// whole model holds, whichever stage asks (docs/design.md, "Checkpoint schema").
struct LogicalTensor {
  std::string name;
  std::vector<std::int64_t> shape;
};
inline std::vector<LogicalTensor> logical_tensors(const GptShape& s) {
  std::vector<LogicalTensor> t;
  const auto add = [&](const ParameterSpec& p) { t.push_back({p.name, p.logical_shape()}); };
  for (const ParameterRow& r : kEmbeddingParameters) add(spec_of(r, s));
  for (int l = 0; l < s.layers; ++l)
    for (const ParameterSpec& p : block_parameters(s, l)) add(p);
  for (const ParameterRow& r : kHeadParameters) add(spec_of(r, s));
  return t;
}

}  // namespace tptrain::model
