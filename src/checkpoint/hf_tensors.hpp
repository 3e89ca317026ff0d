// Which checkpoint dataset is which Hugging Face tensor, for any architecture (docs/checkpoints.md,
// "Hugging Face export and import"). Each row of the model's parameter tables names, in each
// naming family (model::HfNaming), the HF tensor or tensors it is: one whole tensor, possibly
// transposed (GPT-2's Conv1D weights), or consecutive blocks of its rows (Llama's q|k|v and
// gate|up, which tptrain fuses into one matrix and HF keeps apart). This file walks the model's
// logical tensors through those names and moves the elements both ways; both directions use the
// one list it makes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model/spec/gpt_shape.hpp"
#include "src/model/spec/parameter_spec.hpp"

namespace tptrain::checkpoint {

struct HfTensor {
  std::string hf_name;                          // "model.layers.0.self_attn.k_proj.weight"
  std::string checkpoint_name;                  // "layers/0/attn/qkv/weight" (the dataset under /model)
  std::vector<std::uint64_t> checkpoint_shape;  // the whole checkpoint tensor: [(nh + 2 nkv) d, H]
  // The checkpoint tensor's rows (first dimension) this HF tensor holds: [row_begin, row_begin + rows).
  std::uint64_t row_begin = 0, rows = 0;
  bool transposed = false;                      // HF holds the transpose: a Conv1D weight, [in, out]
  // Rows HF holds in another order: in each `period` of its rows, the `width` from `offset` on
  // are rotary features, which tptrain pairs rotate-half (i with i + width/2) and DeepSeek's
  // checkpoints as adjacent pairs (2i with 2i + 1; DeepseekV3Config.rope_interleave). Row
  // offset + i of a period is HF's row offset + 2i, row offset + width/2 + i HF's offset + 2i + 1.
  // period 0: the same order.
  struct InterleavedRows {
    std::uint64_t period = 0, offset = 0, width = 0;
  } interleaved;
  std::vector<std::uint64_t> hf_shape() const;  // [nkv d, H]
  std::uint64_t elements() const;
};

// Every HF tensor of the model under the rows' names of `naming` (model::ParameterRow::hf), in
// checkpoint order (model::logical_tensors) and, within a checkpoint tensor, in row order: a
// stacked row (q|k|v, gate|up) gives one HF tensor per block. Throws std::logic_error for a model
// tensor without a name in that family or a transposed name that is not one whole matrix: a new
// parameter needs its HF names before export and import accept it.
std::vector<HfTensor> hf_tensors(const model::GptShape& shape, model::HfNaming naming);

// The layer index and row name of a block's dataset ("layers/3/attn/qkv/weight" -> 3,
// "attn/qkv/weight"); -1 and the name itself for a model-level one.
struct BlockName {
  int layer = -1;
  std::string row;
};
BlockName split_block_name(const std::string& checkpoint_name);

// The HF tensor's elements from its checkpoint tensor (all of it, checkpoint order): its rows,
// interleaved or transposed as HF holds them.
std::vector<float> to_hf(const HfTensor& t, const std::vector<float>& checkpoint_values);
// The other way: writes the HF tensor's elements into its rows of `checkpoint_values` (sized for
// the whole checkpoint tensor).
void from_hf(const HfTensor& t, const std::vector<float>& hf_values, std::vector<float>& checkpoint_values);

}  // namespace tptrain::checkpoint
