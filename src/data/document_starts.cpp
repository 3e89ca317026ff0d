#include "src/data/document_starts.hpp"

namespace tptrain::data {

void document_starts(const std::int32_t* tokens, std::int64_t sequences, std::int64_t S, std::int32_t end_of_text,
                     std::int32_t* doc_start, std::int32_t* position) {
  for (std::int64_t b = 0; b < sequences; ++b) {
    std::int32_t start = 0;
    for (std::int64_t i = 0; i < S; ++i) {
      const std::int64_t t = b * S + i;
      if (tokens[t] == end_of_text) start = static_cast<std::int32_t>(i);
      if (doc_start) doc_start[t] = start;
      if (position) position[t] = static_cast<std::int32_t>(i) - start;
    }
  }
}

}  // namespace tptrain::data
