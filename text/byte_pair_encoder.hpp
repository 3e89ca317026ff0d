// Byte-pair encoding of one pre-token with GPT-2's merge table (as in GPT-2's encoder.py bpe()):
// the merge loop of text/byte_pair_merge.hpp, where two adjacent parts merge when the table has
// their pair of tokens, at the pair's line in vocab.bpe.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/byte_pair_merge.hpp"
#include "text/gpt2_vocabulary.hpp"

namespace tptrain::text {

class BytePairEncoder {
 public:
  explicit BytePairEncoder(const Gpt2Vocabulary& vocabulary);

  // Appends the tokens of `piece` (any bytes) to `out`.
  void encode(std::string_view piece, std::vector<std::uint32_t>& out) const;

 private:
  std::array<std::uint32_t, 256> byte_token_;
  std::unordered_map<std::uint64_t, RankedMerge> merges_;  // (left << 32 | right) -> rank, merged
};

}  // namespace tptrain::text
