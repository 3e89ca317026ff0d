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
  s.architecture = deck.model.architecture == "llama" ? model::Architecture::llama : model::Architecture::gpt2;
  // GPT-2 has no grouped-query attention (the deck refuses kv_heads != heads for it): heads,
  // also for a deck whose heads changed after it was read.
  s.kv_heads = s.llama() ? deck.model.kv_width() : deck.model.heads;
  s.tie_embeddings = deck.model.tie_embeddings;
  s.norm_eps = deck.model.norm_eps;
  s.rope_theta = deck.model.rope_theta;
  s.ffn_hidden = deck.model.ffn_width();  // ffn_hidden, resolved in a loaded deck
  s.seq_length = deck.model.seq_length;
  s.vocab_size = deck.model.vocab_size;
  s.vocab_pad_multiple = deck.model.vocab_pad_multiple;
  s.tensor = deck.parallel.tensor;
  s.sequence_parallel = deck.parallel.sequence_parallel;
  return s;
}

}  // namespace tptrain::train
