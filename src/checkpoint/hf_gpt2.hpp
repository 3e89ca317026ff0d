// tptrain's GPT-2 as Hugging Face's GPT2LMHeadModel (docs/checkpoints.md, "Hugging Face export
// and import"): which checkpoint dataset is which HF tensor, in which orientation, and the
// config.json that describes the same model (its file format: io/hf_gpt2_config.hpp). Both
// directions use this one table (walked by src/checkpoint/hf_tensors.hpp).
//
// The two models compute the same function: pre-LN blocks, LayerNorm eps 1e-5, GELU in its tanh
// form (HF "gelu_new"), attention scaled by 1/sqrt(head_dim) with the causal mask, the output
// layer tied to the word embedding, no bias on the logits. The layouts differ in one way: a
// checkpoint stores a linear weight as nn.Linear does, [out, in], HF's GPT-2 as Conv1D, [in, out]:
// the four weights of a block are transposed, nothing else is. QKV needs no reordering: the
// checkpoint's qkv/weight rows are all Q, then all K, then all V, head h owning rows h*d..h*d+d-1
// of each, whatever the tensor-parallel layout that wrote it (model_checkpoint.hpp reassembles
// the logical tensor), which is the column order of HF's c_attn (split(n_embd) into q, k, v,
// then view(n_head, head_dim)).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model/spec/gpt_shape.hpp"
#include "src/checkpoint/hf_tensors.hpp"

namespace tptrain::checkpoint {

// Every tensor of the model, in checkpoint order (src/checkpoint/hf_tensors.hpp): one HF tensor per
// checkpoint tensor, the four block weights transposed. Throws std::logic_error for a model
// tensor the table does not map.
// GPT2LMHeadModel's config.json for `shape` (pretty-printed JSON). `gpt2_vocabulary`: the model
// uses GPT-2's tokenizer, so <|endoftext|> = 50256 is its bos/eos token.
std::string hf_gpt2_config(const model::GptShape& shape, bool gpt2_vocabulary);

// What import needs from a config.json, checked to describe a model tptrain computes exactly.
struct HfGpt2Config {
  int n_layer = 0, n_embd = 0, n_head = 0, n_inner = 0, vocab_size = 0, n_positions = 0;
  bool tie_embeddings = true;  // tie_word_embeddings; false: lm_head.weight of its own
};
// Reads and checks `path`: model_type gpt2, activation_function gelu_new (or its other names
// for the tanh form), layer_norm_epsilon 1e-5, no per-layer attention scaling;
// n_inner null means 4 * n_embd. Throws std::runtime_error naming the file and the field.
HfGpt2Config read_hf_gpt2_config(const std::string& path);

// The deck keys against the config's fields: "" if they agree, else one line per difference,
// naming both ("config.json n_embd = 768, the deck's model.hidden = 512"). n_positions may
// exceed model.seq_length (the first seq_length positions are taken).
std::string hf_config_mismatch(const HfGpt2Config& config, const model::GptShape& shape);

}  // namespace tptrain::checkpoint
