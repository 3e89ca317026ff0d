#include "text/rank_encoder.hpp"

#include "text/byte_pair_merge.hpp"
#include "text/text_error.hpp"

namespace tptrain::text {

RankEncoder::RankEncoder(const std::vector<std::string>& token_bytes) {
  offset_.reserve(token_bytes.size() + 1);
  offset_.push_back(0);
  for (const std::string& t : token_bytes) {
    arena_ += t;
    offset_.push_back(arena_.size());
  }
  rank_.reserve(token_bytes.size());
  for (std::uint32_t r = 0; r < token_bytes.size(); ++r) rank_.emplace(bytes(r), r);
  for (unsigned b = 0; b < 256; ++b) {
    const auto rank = rank_of(std::string_view(reinterpret_cast<const char*>(&b), 1));
    if (!rank) throw TextError("a rank table without a token for the byte " + std::to_string(b));
    byte_rank_[b] = *rank;
  }
}

std::optional<std::uint32_t> RankEncoder::rank_of(std::string_view bytes) const {
  const auto it = rank_.find(bytes);
  if (it == rank_.end()) return std::nullopt;
  return it->second;
}

void RankEncoder::encode(std::string_view piece, std::vector<std::uint32_t>& out) const {
  if (piece.empty()) return;
  if (const auto whole = rank_of(piece)) {
    out.push_back(*whole);
    return;
  }
  std::vector<std::uint32_t> token(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) token[i] = byte_rank_[static_cast<unsigned char>(piece[i])];
  merge_lowest_rank_pairs(
      token,
      [&](std::size_t begin, std::size_t, std::size_t end, std::uint32_t, std::uint32_t) -> std::optional<RankedMerge> {
        const auto rank = rank_of(piece.substr(begin, end - begin));
        if (!rank) return std::nullopt;
        return RankedMerge{*rank, *rank};
      },
      out);
}

}  // namespace tptrain::text
