// Every parameter of the model, in checkpoint order: the embedding's, each block's (the block
// descriptor, src/model/spec/block_descriptor.hpp), the head's and the multi-token prediction
// modules' (multi_token_prediction_spec.hpp) — the one list the checkpoints' datasets
// (logical_tensors), the planner's counts and the layers' Parameters come from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/model/spec/block_descriptor.hpp"
#include "src/model/spec/multi_token_prediction_spec.hpp"

namespace tptrain::model {

// On the first pipeline stage: the word embedding (with model.tie_embeddings also the output
// layer: a copy on the last stage), then the rows of the position kind (a learned embedding;
// rotary positions have none). Hugging Face names as in block_descriptor.hpp.
inline constexpr ParameterRow kEmbeddingParameters[] = {
    {"embedding/word", {ParameterDim::vocab, ParameterDim::hidden}, TensorSplit::column, 1, false, true,
     {Init::normal, 0.02f}, true, {}, always, "gpt2=transformer.wte.weight llama=model.embed_tokens.weight "
     "deepseek=model.embed_tokens.weight"},
};
inline constexpr SublayerPlace kEmbeddingPositionPlace{SublayerSlot::position, "embedding"};
// On the last pipeline stage: the final norm's rows (its kind's) and, untied, the output layer's
// own [V padded, H] weight, split by vocabulary rows as the word embedding is.
inline constexpr SublayerPlace kFinalNormPlace{SublayerSlot::norm, "ln_f", "gpt2=transformer.ln_f llama=model.norm deepseek=model.norm"};
inline constexpr ParameterRow kHeadParameters[] = {
    {"lm_head/weight", {ParameterDim::vocab, ParameterDim::hidden}, TensorSplit::column, 1, false, true,
     {Init::normal, 0.02f}, false, {}, needs_untied, "gpt2=lm_head.weight llama=lm_head.weight deepseek=lm_head.weight"},
};

// The first stage's rows for shape s (the word embedding's tied copy only when tied).
inline std::vector<ParameterRow> embedding_parameter_rows(const GptShape& s) {
  std::vector<ParameterRow> rows;
  for (ParameterRow r : kEmbeddingParameters)
    if (holds(r.needs, s)) {
      r.tied_output_copy = r.tied_output_copy && s.tie_embeddings;
      rows.push_back(r);
    }
  for (const ParameterRow& r : kind_parameter_rows(s, kEmbeddingPositionPlace)) rows.push_back(r);
  return rows;
}
// The last stage's rows for shape s.
inline std::vector<ParameterRow> head_parameter_rows(const GptShape& s) {
  std::vector<ParameterRow> rows = kind_parameter_rows(s, kFinalNormPlace);
  for (const ParameterRow& r : kHeadParameters)
    if (holds(r.needs, s)) rows.push_back(r);
  return rows;
}

// The parameter `name` of the embedding, of a block (block_parameter) or of the head.
inline ParameterSpec model_parameter(const GptShape& s, const std::string& name) {
  for (const ParameterRow& r : embedding_parameter_rows(s))
    if (name == r.name) return spec_of(r, s);
  for (const ParameterRow& r : head_parameter_rows(s))
    if (name == r.name) return spec_of(r, s);
  if (const std::optional<ParameterRow> r = mtp_parameter_row(s, name))
    return spec_of(*r, block_shape(s, layer_of(name)), name.substr(0, name.find('/', 7) + 1));
  return block_parameter(s, name);
}

// Name and logical (checkpoint) shape of every model tensor, in checkpoint order: what the
// whole model holds, whichever stage asks (docs/design.md, "Checkpoint schema").
struct LogicalTensor {
  std::string name;
  std::vector<std::int64_t> shape;
};
// The row of the model parameter `name` ("embedding/word", "layers/3/attn/qkv/weight") that shape
// s's specification holds, or nothing.
inline std::optional<ParameterRow> model_parameter_row(const GptShape& s, const std::string& name) {
  for (const ParameterRow& r : embedding_parameter_rows(s))
    if (name == r.name) return r;
  for (const ParameterRow& r : head_parameter_rows(s))
    if (name == r.name) return r;
  if (std::optional<ParameterRow> r = mtp_parameter_row(s, name)) return r;
  const int layer = layer_of(name);
  if (layer < 0 || layer >= s.layers) return std::nullopt;
  const std::string row = name.substr(name.find('/', 7) + 1);
  for (const ParameterRow& r : block_parameter_rows(block_shape(s, layer)))
    if (row == r.name) return r;
  return std::nullopt;
}

inline std::vector<LogicalTensor> logical_tensors(const GptShape& s) {
  std::vector<LogicalTensor> t;
  const auto add = [&](const ParameterSpec& p) { t.push_back({p.name, p.logical_shape()}); };
  for (const ParameterRow& r : embedding_parameter_rows(s)) add(spec_of(r, s));
  for (int l = 0; l < s.layers; ++l)
    for (const ParameterSpec& p : block_parameters(s, l)) add(p);
  for (const ParameterRow& r : head_parameter_rows(s)) add(spec_of(r, s));
  for (int k = 0; k < s.mtp_depth; ++k)
    for (const ParameterSpec& p : mtp_parameters(s, k)) add(p);
  return t;
}

}  // namespace tptrain::model
