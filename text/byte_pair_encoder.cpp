#include "text/byte_pair_encoder.hpp"

#include <algorithm>

namespace tptrain::text {

BytePairEncoder::BytePairEncoder(const Gpt2Vocabulary& vocabulary) : byte_token_(vocabulary.byte_token) {
  merges_.reserve(vocabulary.merges.size());
  for (std::size_t rank = 0; rank < vocabulary.merges.size(); ++rank) {
    const Merge& m = vocabulary.merges[rank];
    merges_.emplace(static_cast<std::uint64_t>(m.left) << 32 | m.right,
                    RankedMerge{static_cast<std::uint32_t>(rank), m.merged});
  }
}

const BytePairEncoder::RankedMerge* BytePairEncoder::find(std::uint32_t left, std::uint32_t right) const {
  const auto it = merges_.find(static_cast<std::uint64_t>(left) << 32 | right);
  return it == merges_.end() ? nullptr : &it->second;
}

void BytePairEncoder::encode(std::string_view piece, std::vector<std::uint32_t>& out) const {
  const std::size_t n = piece.size();
  if (n == 0) return;
  if (n == 1) {
    out.push_back(byte_token_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  // The parts as a linked list over the byte positions; a part is named by its first byte, so
  // positions keep the parts' left-to-right order after any merges.
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  constexpr std::uint32_t gone = static_cast<std::uint32_t>(-1);  // never a token id
  std::vector<std::uint32_t> token(n);
  std::vector<std::size_t> next(n), prev(n);
  for (std::size_t i = 0; i < n; ++i) {
    token[i] = byte_token_[static_cast<unsigned char>(piece[i])];
    next[i] = i + 1 < n ? i + 1 : none;
    prev[i] = i > 0 ? i - 1 : none;
  }
  // Candidate merges, lowest (rank, position) first: among the pairs of the best rank the
  // leftmost goes first, which merges GPT-2's non-overlapping occurrences left to right. A
  // candidate goes stale when either part has changed since (a part merged into its left
  // neighbour holds the token `gone`); it is then skipped.
  struct Candidate {
    std::uint32_t rank;
    std::size_t position;
    std::uint32_t left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : position > o.position; }
  };
  std::vector<Candidate> heap;
  heap.reserve(n);
  const auto push = [&](std::size_t i) {
    if (i == none || next[i] == none) return;
    if (const RankedMerge* m = find(token[i], token[next[i]])) {
      heap.push_back({m->rank, i, token[i], token[next[i]]});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate c = heap.back();
    heap.pop_back();
    const std::size_t i = c.position;
    const std::size_t j = next[i];
    if (j == none || token[i] != c.left || token[j] != c.right) continue;  // stale
    token[i] = find(c.left, c.right)->merged;
    token[j] = gone;
    next[i] = next[j];
    if (next[j] != none) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  for (std::size_t i = 0; i != none; i = next[i]) out.push_back(token[i]);
}

}  // namespace tptrain::text
