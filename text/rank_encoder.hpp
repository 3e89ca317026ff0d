// Byte-pair encoding of one pre-token with a tiktoken rank table (tiktoken's byte_pair_encode):
// the merge loop of text/byte_pair_merge.hpp, where two adjacent parts merge when their bytes
// together are a token, at that token's rank. A piece that is a token whole is that token, as
// tiktoken's encode_ordinary looks it up before merging.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tptrain::text {

class RankEncoder {
 public:
  // `token_bytes`: the bytes of every token by rank (text/tiktoken_ranks.hpp), every byte among
  // them.
  explicit RankEncoder(const std::vector<std::string>& token_bytes);
  RankEncoder(const RankEncoder&) = delete;
  RankEncoder& operator=(const RankEncoder&) = delete;

  std::size_t size() const { return offset_.size() - 1; }
  // The bytes of token `rank` < size().
  std::string_view bytes(std::uint32_t rank) const {
    return std::string_view(arena_).substr(offset_[rank], offset_[rank + 1] - offset_[rank]);
  }
  std::optional<std::uint32_t> rank_of(std::string_view bytes) const;

  // Appends the tokens of `piece` (any bytes) to `out`.
  void encode(std::string_view piece, std::vector<std::uint32_t>& out) const;

 private:
  std::string arena_;                 // every token's bytes, in rank order
  std::vector<std::size_t> offset_;   // token r is arena_[offset_[r], offset_[r + 1])
  std::unordered_map<std::string_view, std::uint32_t> rank_;  // keys view arena_
  std::uint32_t byte_rank_[256];
};

}  // namespace tptrain::text
