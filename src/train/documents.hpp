// What a run derives from its token batches for documents packed into sequences
// (data.document_mask, data.reset_positions; src/data/document_starts.hpp), and which of each
// sequence's tokens the rank computes (context parallelism, base/context_chunks.hpp): the
// training queue (micro_batches.hpp) and the forward-only batches of eval (device_batch.hpp) use
// it.
#pragma once

#include <cstdint>
#include <vector>

#include "base/context_chunks.hpp"
#include "io/deck.hpp"
#include "src/data/document_starts.hpp"
#include "text/tokenizer.hpp"

namespace tptrain::train {

struct Documents {
  std::int32_t end_of_text = -1;  // the token that opens a document; -1: none
  std::int64_t seq_length = 0;
  bool mask = false;             // each token's document start (flash attention's document mask)
  bool reset_positions = false;  // each token's position in its document
  bool group_positions = false;  // with positions(): the tokens grouped by position
                                 // (the learned position gradient, where the embedding is)
  // parallel.context: the rank computes two chunks of each sequence (size 1: all of it). Its
  // rows then need their global positions (and document starts), whatever the documents.
  ContextChunks context;

  bool packed() const { return end_of_text >= 0 && (mask || reset_positions); }
  bool any() const { return packed() || context.split(); }
  bool doc_starts() const { return packed() && mask; }                         // each row's document start
  bool positions() const { return (packed() && reset_positions) || context.split(); }  // each row's position id
  // The rows of a sequence the rank computes: seq_length, or 2c of it.
  std::int64_t local_length() const { return context.split() ? context.local() : seq_length; }

  // The document starts and positions of n tokens, whole sequences of seq_length (either output
  // may be nullptr).
  void derive(const std::int32_t* inputs, std::int64_t n, std::int32_t* doc_start, std::int32_t* position) const {
    data::document_starts(inputs, n / seq_length, seq_length, end_of_text, doc_start, position);
  }

  // Whole sequences (B·seq_length tokens, targets, and what the documents derive from them) cut to
  // the rank's rows (B·local_length()): with context parallelism its two chunks of each sequence,
  // with their global positions (or reset ones) and global document starts. Any output may be
  // nullptr; `work` holds the whole sequences' document starts and positions.
  void take_rows(std::int64_t sequences, const std::int32_t* inputs, const std::int32_t* targets,
                 std::int32_t* local_inputs, std::int32_t* local_targets, std::int32_t* doc_start,
                 std::int32_t* position, std::vector<std::int32_t>& work) const {
    const std::int64_t S = seq_length, L = local_length(), n = sequences * S;
    const bool docs = packed() && (doc_start != nullptr || (position != nullptr && reset_positions));
    if (docs) {
      work.resize(static_cast<std::size_t>(2 * n));
      derive(inputs, n, work.data(), work.data() + n);
    }
    for (std::int64_t b = 0; b < sequences; ++b)
      for (std::int64_t i = 0; i < L; ++i) {
        const std::int64_t g = b * S + context.position(i), l = b * L + i;
        if (local_inputs) local_inputs[l] = inputs[g];
        if (local_targets) local_targets[l] = targets[g];
        if (doc_start) doc_start[l] = docs ? work[std::size_t(g)] : 0;
        if (position)
          position[l] = docs && reset_positions ? work[std::size_t(n + g)] : static_cast<std::int32_t>(context.position(i));
      }
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
