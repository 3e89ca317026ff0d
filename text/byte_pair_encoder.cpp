#include "text/byte_pair_encoder.hpp"

namespace tptrain::text {

BytePairEncoder::BytePairEncoder(const Gpt2Vocabulary& vocabulary) : byte_token_(vocabulary.byte_token) {
  merges_.reserve(vocabulary.merges.size());
  for (std::size_t rank = 0; rank < vocabulary.merges.size(); ++rank) {
    const Merge& m = vocabulary.merges[rank];
    merges_.emplace(static_cast<std::uint64_t>(m.left) << 32 | m.right,
                    RankedMerge{static_cast<std::uint32_t>(rank), m.merged});
  }
}

void BytePairEncoder::encode(std::string_view piece, std::vector<std::uint32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out.push_back(byte_token_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  std::vector<std::uint32_t> token(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) token[i] = byte_token_[static_cast<unsigned char>(piece[i])];
  merge_lowest_rank_pairs(
      token,
      [&](std::size_t, std::size_t, std::size_t, std::uint32_t left, std::uint32_t right) -> std::optional<RankedMerge> {
        const auto it = merges_.find(static_cast<std::uint64_t>(left) << 32 | right);
        if (it == merges_.end()) return std::nullopt;
        return it->second;
      },
      out);
}

}  // namespace tptrain::text
