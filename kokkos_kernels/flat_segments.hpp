// The segment table of a flat parameter bucket: the bucket's values, gradients and AdamW moments
// are flat buffers of one length, each parameter a contiguous segment [begin, end) at the same
// offsets in all of them. The per-bucket kernels (bucket_squared_norms in reductions.hpp,
// bucket_adamw_update in adamw.hpp) need per segment only a few flags, so that one launch covers
// the whole bucket instead of one per parameter.
//
// Built once on the host. On the device the table is a list of chunks: every segment is cut into
// pieces of at most `chunk` elements, and a kernel runs one team per chunk. A team so never has to
// search for the segment of an element (its chunk says it), the work is balanced although segment
// sizes differ by 10^4 (LayerNorm 768, word embedding 38.6M), and adjacent threads of a team read
// adjacent elements (coalesced on GPUs).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

// One parameter of a bucket, as the host describes it.
struct FlatSegment {
  std::int64_t begin = 0, end = 0;  // [begin, end) in the bucket's flat buffers
  bool weight_decay = false;        // AdamW decays it: 2-D weights yes, biases and LayerNorm no
  bool replicated = false;          // identical on every TP rank (counted once in the norm), else
                                    // TP-sharded (its local part summed over the TP group)
  bool counted = true;              // in the gradient norm; false for the tied copy of the word
                                    // embedding on the last pipeline stage (the first counts it)
};

namespace detail {

// One team's work: a piece of one segment, with that segment's flags.
struct FlatChunk {
  std::int64_t begin, end;
  std::int32_t norm_slot;     // index into {sharded, replicated}; -1: not in the norm
  std::int32_t weight_decay;  // 1: decayed
};

// Elements per chunk: on GPUs enough for a team of a few hundred threads to take ~16 each and
// still give thousands of teams per bucket; on the host a team is one thread, so longer chunks
// only cut the per-team overhead.
template <class Exec>
constexpr std::int64_t default_flat_chunk() {
  return std::is_same<typename Exec::memory_space, Kokkos::HostSpace>::value ? std::int64_t(1) << 14
                                                                             : std::int64_t(1) << 12;
}

}  // namespace detail

// The part [begin, end) of a bucket's segment table, renumbered from 0: every segment cut to the
// range (those outside it become empty and stay, so that segment i is still parameter i). For a
// distributed optimizer's shard of a bucket, whose kernels see the shard's elements only.
// `segments` must reach `end`.
inline std::vector<FlatSegment> segments_in_range(const std::vector<FlatSegment>& segments, std::int64_t begin,
                                                  std::int64_t end) {
  detail::require(0 <= begin && begin <= end && !segments.empty() && segments.back().end >= end,
                  "segments_in_range", "the range must lie inside the segments");
  std::vector<FlatSegment> out;
  for (FlatSegment s : segments) {
    const std::int64_t b = s.begin < begin ? begin : s.begin > end ? end : s.begin;
    const std::int64_t e = s.end < b ? b : s.end > end ? end : s.end;
    s.begin = b - begin;
    s.end = e - begin;
    out.push_back(s);
  }
  return out;
}

template <class Exec>
class FlatSegments {
 public:
  using chunk_view = Kokkos::View<const detail::FlatChunk*, typename Exec::memory_space>;

  // `segments` must tile [0, length) in order: segments[0].begin == 0 and each begin equal to the
  // previous end (empty segments allowed). An element no segment covered would silently never
  // be updated, so a gap or an overlap is refused (std::invalid_argument).
  explicit FlatSegments(std::vector<FlatSegment> segments,
                        std::int64_t chunk = detail::default_flat_chunk<Exec>())
      : segments_(std::move(segments)), chunk_(chunk) {
    detail::require(chunk_ >= 1, "FlatSegments", "chunk must be positive");
    std::vector<detail::FlatChunk> host;
    for (const FlatSegment& s : segments_) {
      detail::require(s.begin == length_, "FlatSegments",
                      "segments must tile the buffer: each begins where the previous ends, the "
                      "first at 0");
      detail::require(s.end >= s.begin, "FlatSegments", "segment end before its begin");
      const std::int32_t slot = !s.counted ? -1 : s.replicated ? 1 : 0;
      for (std::int64_t b = s.begin; b < s.end; b += chunk_) {
        host.push_back({b, b + chunk_ < s.end ? b + chunk_ : s.end, slot, s.weight_decay ? 1 : 0});
      }
      length_ = s.end;
    }
    Kokkos::View<detail::FlatChunk*, typename Exec::memory_space> chunks(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "tptrain::kernels::FlatSegments"),
        host.size());
    const Kokkos::View<const detail::FlatChunk*, Kokkos::HostSpace,
                       Kokkos::MemoryTraits<Kokkos::Unmanaged>>
        h(host.data(), host.size());
    Kokkos::deep_copy(chunks, h);  // blocking: `host` dies at the end of this scope
    chunks_ = chunks;
  }

  std::int64_t size() const { return length_; }  // elements in the bucket's flat buffers
  std::int64_t chunk() const { return chunk_; }
  const std::vector<FlatSegment>& segments() const { return segments_; }
  const chunk_view& chunks() const { return chunks_; }  // one team each

 private:
  std::vector<FlatSegment> segments_;
  std::int64_t chunk_ = 1;
  std::int64_t length_ = 0;
  chunk_view chunks_;
};

}  // namespace tptrain::kernels
