// Which checkpoint dataset is which Hugging Face tensor, for any architecture (docs/checkpoints.md,
// "Hugging Face export and import"). An architecture's table (src/train/hf_gpt2.cpp,
// src/train/hf_llama.cpp) names, for each row of the model's parameter tables, the HF tensor or
// tensors it is: one whole tensor, possibly transposed (GPT-2's Conv1D weights), or consecutive
// blocks of its rows (Llama's q|k|v and gate|up, which tptrain fuses into one matrix and HF keeps
// apart). This file walks the model's logical tensors through such a table and moves the elements
// both ways; both directions use the one list it makes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model/gpt_shape.hpp"

namespace tptrain::train {

struct HfTensor {
  std::string hf_name;                          // "model.layers.0.self_attn.k_proj.weight"
  std::string checkpoint_name;                  // "layers/0/attn/qkv/weight" (the dataset under /model)
  std::vector<std::uint64_t> checkpoint_shape;  // the whole checkpoint tensor: [(nh + 2 nkv) d, H]
  // The checkpoint tensor's rows (first dimension) this HF tensor holds: [row_begin, row_begin + rows).
  std::uint64_t row_begin = 0, rows = 0;
  bool transposed = false;                      // HF holds the transpose: a Conv1D weight, [in, out]
  std::vector<std::uint64_t> hf_shape() const;  // [nkv d, H]
  std::uint64_t elements() const;
};

// One HF tensor a checkpoint tensor is made of. `rows` 0: all of them (the only piece).
struct HfPiece {
  std::string hf_name;
  std::uint64_t rows = 0;
  bool transposed = false;
};

// An architecture's table: the pieces of the checkpoint tensor `name` (the whole dataset name,
// "layers/3/attn/qkv/weight"), in row order; empty when the table does not map it.
using HfPieces = std::vector<HfPiece> (*)(const model::GptShape& shape, const std::string& name);

// Every HF tensor of the model, in checkpoint order (model::logical_tensors) and, within a
// checkpoint tensor, in row order. Throws std::logic_error for a model tensor the table does not
// map, pieces that do not cover its rows exactly, or a transposed piece that is not a whole
// matrix: a new parameter needs its HF name before export and import accept it.
std::vector<HfTensor> hf_tensors(const model::GptShape& shape, HfPieces pieces, const char* table);

// The layer index and row name of a block's dataset ("layers/3/attn/qkv/weight" -> 3,
// "attn/qkv/weight"); -1 and the name itself for a model-level one.
struct BlockName {
  int layer = -1;
  std::string row;
};
BlockName split_block_name(const std::string& checkpoint_name);

// The HF tensor's elements from its checkpoint tensor (all of it, checkpoint order): its rows,
// transposed if HF holds the transpose.
std::vector<float> to_hf(const HfTensor& t, const std::vector<float>& checkpoint_values);
// The other way: writes the HF tensor's elements into its rows of `checkpoint_values` (sized for
// the whole checkpoint tensor).
void from_hf(const HfTensor& t, const std::vector<float>& hf_values, std::vector<float>& checkpoint_values);

}  // namespace tptrain::train
