// The model shape a deck describes: its [model] keys, the tensor-parallel size and sequence
// parallelism. Shared by training (the model each rank builds) and planning (src/plan), which
// must not pull in the training layer.
#pragma once

#include "io/deck.hpp"
#include "src/model/gpt_shape.hpp"

namespace tptrain::train {

inline model::GptShape shape_of(const io::Deck& deck) {
  model::GptShape s;
  s.layers = deck.model.layers;
  s.hidden = deck.model.hidden;
  s.heads = deck.model.heads;
  s.ffn_hidden = deck.model.ffn_width();  // ffn_hidden, resolved in a loaded deck
  s.seq_length = deck.model.seq_length;
  s.vocab_size = deck.model.vocab_size;
  s.vocab_pad_multiple = deck.model.vocab_pad_multiple;
  s.tensor = deck.parallel.tensor;
  s.sequence_parallel = deck.parallel.sequence_parallel;
  return s;
}

}  // namespace tptrain::train
