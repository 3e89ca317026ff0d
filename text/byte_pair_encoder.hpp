// Byte-pair encoding of one pre-token (Sennrich et al. 2016, as in GPT-2's encoder.py bpe()):
// start from the one-byte tokens and repeatedly merge the adjacent pair of lowest merge rank,
// every non-overlapping occurrence from left to right, until no adjacent pair has a rank.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/gpt2_vocabulary.hpp"

namespace tptrain::text {

class BytePairEncoder {
 public:
  explicit BytePairEncoder(const Gpt2Vocabulary& vocabulary);

  // Appends the tokens of `piece` (any bytes) to `out`. O(n log n) in the piece's length, so a
  // megabyte without a break (a run of letters or spaces) costs no more than its size suggests.
  void encode(std::string_view piece, std::vector<std::uint32_t>& out) const;

 private:
  struct RankedMerge {
    std::uint32_t rank;
    std::uint32_t merged;
  };
  const RankedMerge* find(std::uint32_t left, std::uint32_t right) const;

  std::array<std::uint32_t, 256> byte_token_;
  std::unordered_map<std::uint64_t, RankedMerge> merges_;  // (left << 32 | right) -> rank, merged
};

}  // namespace tptrain::text
