// Documents inside packed sequences (data.document_mask, data.reset_positions): tokenize opens
// every document with <|endoftext|>, which belongs to the document it opens, and sequences are
// windows of the token stream, so a sequence holds the tail of one document (the first, partial
// one, from position 0) and then whole documents, each starting at an <|endoftext|>.
// For each token of `sequences` sequences of S tokens:
//   doc_start[t]  the position (within its sequence) of the first token of its document: the last
//                 <|endoftext|> at or before it, or 0 (flash attention's document mask: a token
//                 attends to positions doc_start[t] .. its own)
//   position[t]   its position within its document, t's position - doc_start[t] (the position ids
//                 that restart at each document)
// Either output may be nullptr.
#pragma once

#include <cstdint>

namespace tptrain::data {

void document_starts(const std::int32_t* tokens, std::int64_t sequences, std::int64_t S, std::int32_t end_of_text,
                     std::int32_t* doc_start, std::int32_t* position);

}  // namespace tptrain::data
