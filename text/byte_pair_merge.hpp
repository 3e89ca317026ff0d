// The merge loop of byte-pair encoding (Sennrich et al. 2016), shared by GPT-2's merge table
// (text/byte_pair_encoder.hpp) and tiktoken's rank files (text/rank_encoder.hpp): start from the
// one-byte parts of a piece and repeatedly merge the adjacent pair of lowest rank, the leftmost
// of equal ranks first, until no adjacent pair has a rank. That is GPT-2's encoder.py bpe() (the
// non-overlapping occurrences of the best pair, left to right) and tiktoken's byte_pair_merge
// (the minimum rank, leftmost on ties) alike. O(n log n) in the piece's length: candidates wait
// in a heap, so a megabyte without a break costs no more than its size suggests.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace tptrain::text {

// What merging two adjacent parts gives: the merge's rank and the merged part's token.
struct RankedMerge {
  std::uint32_t rank;
  std::uint32_t merged;
};

// `token[i]`: the token of byte i of a piece of token.size() bytes (at least 2). `merge_of(begin,
// mid, end, left, right)` is the merge of the adjacent parts [begin, mid) and [mid, end), whose
// tokens are `left` and `right`, or std::nullopt when they do not merge. Appends the tokens of
// the merged parts to `out`.
template <class MergeOf>
void merge_lowest_rank_pairs(std::vector<std::uint32_t>& token, const MergeOf& merge_of,
                             std::vector<std::uint32_t>& out) {
  const std::size_t n = token.size();
  // The parts as a linked list over the byte positions; a part is named by its first byte, so
  // positions keep the parts' left-to-right order after any merges. next[i] == n: the last part.
  std::vector<std::size_t> next(n), prev(n);
  for (std::size_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    prev[i] = i > 0 ? i - 1 : 0;  // prev[0] is never read: position 0 is always the first part
  }
  // Candidates, lowest (rank, position) first. One goes stale when either part has changed
  // since it was pushed (its positions no longer bound two adjacent parts as they did); it is
  // then skipped.
  struct Candidate {
    std::uint32_t rank;
    std::size_t position, mid, end;
    std::uint32_t merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : position > o.position; }
  };
  std::vector<Candidate> heap;
  heap.reserve(n);
  const auto push = [&](std::size_t i) {
    const std::size_t mid = next[i];
    if (mid >= n) return;
    const std::size_t end = next[mid];
    if (const std::optional<RankedMerge> m = merge_of(i, mid, end, token[i], token[mid])) {
      heap.push_back({m->rank, i, mid, end, m->merged});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate c = heap.back();
    heap.pop_back();
    const std::size_t i = c.position;
    if (next[i] != c.mid || next[c.mid] != c.end) continue;  // stale
    token[i] = c.merged;
    next[c.mid] = c.mid;  // gone: no candidate naming it as a left part is adjacent any more
    next[i] = c.end;
    if (c.end < n) prev[c.end] = i;
    if (i > 0) push(prev[i]);
    push(i);
  }
  for (std::size_t i = 0; i < n; i = next[i]) out.push_back(token[i]);
}

}  // namespace tptrain::text
