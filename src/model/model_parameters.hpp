// Every parameter of the model, in checkpoint order: the embedding's, each block's (the block
// descriptor, src/model/block_descriptor.hpp) and the head's — the one list the checkpoints'
// datasets (logical_tensors), the planner's counts and the layers' Parameters come from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model/block_descriptor.hpp"

namespace tptrain::model {

// GPT-2's rows (embedding_parameter_rows and head_parameter_rows give a shape's). On the first
// pipeline stage. With model.tie_embeddings the output layer is the word embedding.
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

// The untied output layer (model.tie_embeddings = false; Llama's default): its own
// [V padded, H] weight, split by vocabulary rows as the word embedding is.
inline constexpr ParameterRow kUntiedHeadParameter = {
    "lm_head/weight", {ParameterDim::vocab, ParameterDim::hidden}, TensorSplit::column, 1, false, true,
    {Init::normal, 0.02f}};

// The first stage's rows for shape s: the word embedding (with a tied copy on the last stage
// only when tied) and, for GPT-2, the learned position embedding (llama rotates q and k instead).
inline std::vector<ParameterRow> embedding_parameter_rows(const GptShape& s) {
  ParameterRow word = kEmbeddingParameters[0];
  word.tied_output_copy = s.tie_embeddings;
  std::vector<ParameterRow> rows{word};
  if (!s.llama()) rows.push_back(kEmbeddingParameters[1]);
  return rows;
}
// The last stage's rows for shape s: the final norm (GPT-2's LayerNorm: weight and bias; llama's
// RMSNorm: weight) and, untied, lm_head/weight.
inline std::vector<ParameterRow> head_parameter_rows(const GptShape& s) {
  std::vector<ParameterRow> rows{kHeadParameters[0]};
  if (!s.llama()) rows.push_back(kHeadParameters[1]);
  if (!s.tie_embeddings) rows.push_back(kUntiedHeadParameter);
  return rows;
}

// The parameter `name` of the embedding, of a block (block_parameter) or of the head.
inline ParameterSpec model_parameter(const GptShape& s, const std::string& name) {
  for (const ParameterRow& r : embedding_parameter_rows(s))
    if (name == r.name) return spec_of(r, s);
  for (const ParameterRow& r : head_parameter_rows(s))
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
  for (const ParameterRow& r : embedding_parameter_rows(s)) add(spec_of(r, s));
  for (int l = 0; l < s.layers; ++l)
    for (const ParameterSpec& p : block_parameters(s, l)) add(p);
  for (const ParameterRow& r : head_parameter_rows(s)) add(spec_of(r, s));
  return t;
}

}  // namespace tptrain::model
