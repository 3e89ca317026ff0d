// Tokens of one segment of a corpus (src/data/corpus.hpp), as `tptrain tokenize` writes them:
// every document preceded by the tokenizer's end-of-text token (GPT-2's <|endoftext|>; as llm.c's
// data scripts do: the stream starts with it, and a model sees where every document begins), its
// text encoded as ordinary text (tiktoken's encode_ordinary: a literal "<|endoftext|>" inside a
// document stays text). A tokenizer without an end-of-text token (bytes) joins the documents
// with nothing between them. Plain C++17: no MPI.
#pragma once

#include <cstdint>
#include <vector>

#include "src/data/corpus.hpp"
#include "text/tokenizer.hpp"

namespace tptrain::data {

struct SegmentTokens {
  std::vector<std::uint32_t> tokens;  // as the tokenizer gave them (the shard writer narrows to its version)
  std::uint64_t documents = 0;        // documents that start in the segment
  std::uint64_t empty_documents = 0;  // JSON lines whose "text" is "" (skipped: no tokens at all)
};

// Tokenizes stream bytes [begin, end) (two cut points). `documents_per_file[f]` is incremented
// for every document of file f that starts here. Throws DataError naming the file and byte
// offset for text that is not UTF-8 (and everything Corpus::read throws).
SegmentTokens tokenize_segment(const Corpus& corpus, std::uint64_t begin, std::uint64_t end,
                               text::Tokenizer& tokenizer, std::vector<std::uint64_t>& documents_per_file);

}  // namespace tptrain::data
