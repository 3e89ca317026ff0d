#include "src/data/segment_tokens.hpp"

#include <type_traits>

#include "src/data/token_dataset.hpp"  // DataError
#include "text/utf8.hpp"

namespace tptrain::data {

SegmentTokens tokenize_segment(const Corpus& corpus, std::uint64_t begin, std::uint64_t end,
                               text::Tokenizer& tokenizer, std::vector<std::uint64_t>& documents_per_file) {
  SegmentTokens out;
  std::vector<text::Token> tokens;
  corpus.read(begin, end, [&](const DocumentPart& part) {
    if (part.from_json && part.text.empty()) {
      ++out.empty_documents;
      return;
    }
    // Text files are checked here, so that the offset in the message is the file's.
    if (!part.from_json)
      if (const auto bad = text::utf8_problem(part.text))
        throw DataError(corpus.where(part.file, part.offset + bad->offset()) + ": not valid UTF-8 (" + bad->reason() +
                        ")");
    tokens.clear();
    if (part.starts_document) {
      ++out.documents;
      ++documents_per_file[part.file];
      if (const auto eot = tokenizer.end_of_text()) tokens.push_back(*eot);
    }
    tokenizer.encode_ordinary(part.text, tokens);
    static_assert(std::is_same_v<text::Token, std::uint32_t>, "segments hold the tokenizer's ids as they are");
    out.tokens.insert(out.tokens.end(), tokens.begin(), tokens.end());
  });
  return out;
}

}  // namespace tptrain::data
