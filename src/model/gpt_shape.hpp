// The model's logical shape (from the deck's [model]) and what one tensor-parallel rank holds.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace tptrain::model {

struct GptShape {
  int layers = 4;
  int hidden = 128;     // H
  int heads = 4;        // nh
  int ffn_hidden = 512; // F
  int seq_length = 128; // S
  int vocab_size = 256; // V
  int tensor = 1;       // TP size

  int head_dim() const { return hidden / heads; }
  // Megatron pads the vocabulary to a multiple of the TP size; padded logits are masked out.
  int padded_vocab() const { return (vocab_size + tensor - 1) / tensor * tensor; }
  int local_vocab() const { return padded_vocab() / tensor; }    // rows of wte on one rank
  int local_heads() const { return heads / tensor; }
  int local_hidden() const { return hidden / tensor; }           // Hl = local heads * d
  int local_ffn() const { return ffn_hidden / tensor; }
  int vocab_start(int tp_rank) const { return tp_rank * local_vocab(); }
  // Real (non-padding) vocabulary rows held by a rank.
  int valid_vocab(int tp_rank) const {
    const int v = vocab_size - vocab_start(tp_rank);
    return v < 0 ? 0 : (v > local_vocab() ? local_vocab() : v);
  }

  void validate() const {
    if (hidden % heads != 0 || heads % tensor != 0 || ffn_hidden % tensor != 0)
      throw std::invalid_argument("tptrain: model shape not divisible by the tensor-parallel size");
  }
};

}  // namespace tptrain::model
