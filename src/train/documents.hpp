// What a run derives from its token batches for documents packed into sequences
// (data.document_mask, data.reset_positions; src/data/document_starts.hpp): the training queue
// (micro_batches.hpp) and the forward-only batches of eval (device_batch.hpp) use it.
#pragma once

#include <cstdint>

#include "io/deck.hpp"
#include "src/data/document_starts.hpp"
#include "text/tokenizer.hpp"

namespace tptrain::train {

struct Documents {
  std::int32_t end_of_text = -1;  // the token that opens a document; -1: none
  std::int64_t seq_length = 0;
  bool mask = false;             // each token's document start (flash attention's document mask)
  bool reset_positions = false;  // each token's position in its document
  bool group_positions = false;  // with reset_positions: the tokens grouped by that position
                                 // (the learned position gradient, where the embedding is)
  bool any() const { return end_of_text >= 0 && (mask || reset_positions); }
  // The document starts and positions of n tokens, whole sequences of seq_length (either output
  // may be nullptr).
  void derive(const std::int32_t* inputs, std::int64_t n, std::int32_t* doc_start, std::int32_t* position) const {
    data::document_starts(inputs, n / seq_length, seq_length, end_of_text, doc_start, position);
  }
};

inline Documents documents_of(const io::Deck& deck) {
  Documents d;
  if (const auto eot = text::end_of_text_of(deck.data.tokenizer)) d.end_of_text = static_cast<std::int32_t>(*eot);
  d.seq_length = deck.model.seq_length;
  d.mask = deck.data.document_mask;
  d.reset_positions = deck.data.reset_positions;
  return d;
}

}  // namespace tptrain::train
