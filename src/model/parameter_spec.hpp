// A model tensor described as plain data: the rows of the descriptor tables
// (src/model/block_descriptor.hpp, src/model/model_parameters.hpp) and what a row becomes for one
// shape (ParameterSpec), from which the layers make their Parameters, the checkpoint lists its
// datasets and the planner counts a rank's elements. No Kokkos, no MPI: the planner reads it too.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "src/model/gpt_shape.hpp"

namespace tptrain::model {

// A logical dimension of a parameter, by symbol, so that one table gives both the sizes of a
// shape and the formulas the docs print.
enum class ParameterDim {
  none,    // (the unused second dimension of a vector)
  hidden,  // H
  qkv,     // (nh + 2·nkv)·d: Q, K and V stacked (3H without grouped-query attention)
  kv,      // nkv·d: the K (or V) rows of the QKV weight
  ffn,     // F
  ffn2,    // 2F: SwiGLU's gate and up stacked
  vocab,   // V, allocated padded to a multiple of vocab_pad_multiple * tensor (GptShape::padded_vocab)
  seq,     // S
};

// How a tensor is split over the tensor-parallel group (Megatron-LM section 3).
enum class TensorSplit {
  replicated,  // every rank holds all of it
  column,      // dimension 0 (a weight's output features, a bias's elements, vocabulary rows)
  row,         // dimension 1 (a weight's input features)
};

// The initial value of every element (docs/design.md, "Initialisation").
struct Init {
  enum Kind { normal, residual_normal, constant };
  Kind kind = constant;
  float value = 0.0f;  // normal: the standard deviation; residual_normal: the same before ÷ √(2L); constant: it
};

// One row of a descriptor table.
struct ParameterRow {
  const char* name;           // its checkpoint path under /model; a block's row: under layers/<i>/
  ParameterDim shape[2];      // logical, [out, in] for a weight; a vector leaves the second none
  TensorSplit split;
  int blocks;                 // a column split of stacked blocks splits each block (QKV: 3, gate|up: 2)
  bool sequence_parallel_sum; // with sequence parallelism each rank holds the gradient of its own tokens,
                              // summed over the group (LayerNorms, row-parallel biases)
  bool weight_decay;          // AdamW decays matrices, not biases or LayerNorms
  Init init;
  // The last pipeline stage holds a copy too (the output layer tied to the word embedding), not
  // written to checkpoints: it has the same name, hence the same initial values.
  bool tied_output_copy = false;
  // The blocks' logical extents along the split dimension when they differ (llama's QKV with
  // grouped-query attention: Q, K, V); none: `blocks` equal blocks.
  ParameterDim block_dims[3] = {ParameterDim::none, ParameterDim::none, ParameterDim::none};
};

// A row for one shape: everything a layer needs to make the Parameter.
struct ParameterSpec {
  std::string name;                   // checkpoint path under /model
  std::vector<std::int64_t> shape;    // allocated logical shape (the vocabulary padded)
  std::int64_t saved_rows = 0;        // rows that exist logically, and in checkpoints (< shape[0] when padded)
  TensorSplit split = TensorSplit::replicated;
  int blocks = 1;
  std::vector<std::int64_t> block_extents;  // logical extent of each block along the split; empty: equal blocks
  bool sequence_parallel_gradient = false;  // the row's sequence_parallel_sum, when the shape splits sequences
  bool weight_decay = false;
  float init_std = 0.0f;  // 0: the constant init_const
  float init_const = 0.0f;
  bool tied_output_copy = false;

  int split_dim() const { return split == TensorSplit::replicated ? -1 : split == TensorSplit::column ? 0 : 1; }
  // The shape of the checkpoint's dataset: shape with saved_rows rows.
  std::vector<std::int64_t> logical_shape() const {
    std::vector<std::int64_t> s = shape;
    s[0] = saved_rows;
    return s;
  }
  // Elements one of `tensor` ranks allocates.
  std::int64_t local_elements(int tensor) const {
    std::int64_t n = 1;
    for (const std::int64_t d : shape) n *= d;
    return split == TensorSplit::replicated ? n : n / tensor;
  }
};

inline std::int64_t extent(ParameterDim d, const GptShape& s) {
  switch (d) {
    case ParameterDim::hidden: return s.hidden;
    case ParameterDim::qkv: return s.qkv_width();
    case ParameterDim::kv: return s.kv_width();
    case ParameterDim::ffn: return s.ffn_hidden;
    case ParameterDim::ffn2: return 2 * std::int64_t(s.ffn_hidden);
    case ParameterDim::vocab: return s.padded_vocab();
    case ParameterDim::seq: return s.seq_length;
    case ParameterDim::none: break;
  }
  return 1;
}

// Row `r` for shape `s`, named `prefix` + its name.
inline ParameterSpec spec_of(const ParameterRow& r, const GptShape& s, const std::string& prefix = "") {
  ParameterSpec p;
  p.name = prefix + r.name;
  for (const ParameterDim d : r.shape)
    if (d != ParameterDim::none) p.shape.push_back(extent(d, s));
  p.saved_rows = r.shape[0] == ParameterDim::vocab ? s.vocab_size : p.shape[0];
  p.split = r.split;
  p.blocks = r.blocks;
  if (r.block_dims[0] != ParameterDim::none)
    for (int b = 0; b < r.blocks; ++b) p.block_extents.push_back(extent(r.block_dims[b], s));
  p.sequence_parallel_gradient = r.sequence_parallel_sum && s.splits_sequence();
  p.weight_decay = r.weight_decay;
  // In float, as GPT-2's recipe was always computed here: the same bits as before the table.
  if (r.init.kind == Init::normal) p.init_std = r.init.value;
  if (r.init.kind == Init::residual_normal) p.init_std = r.init.value / std::sqrt(2.0f * s.layers);
  if (r.init.kind == Init::constant) p.init_const = r.init.value;
  p.tied_output_copy = r.tied_output_copy;
  return p;
}

}  // namespace tptrain::model
