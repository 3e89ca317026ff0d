// Vocab-parallel token embedding and learned position embedding (Megatron
// VocabParallelEmbedding pieces). A rank holds wte rows for vocabulary ids
// [vocab_start, vocab_start + Vl); tokens outside that range give zero rows here, and the caller
// all-reduces y over the tensor-parallel group.
// Tokens are row t = b*S + s of the [N, H] activations, N = B*S.
// Backward kernels are deterministic (fixed summation order, no atomics).
// Precision: wte, wpe, y, dy may hold kx::bf16 / kx::fp16 (the forward copies or adds in float
// and rounds once); the gradients dwte / dwpe are meant to be float and are summed in acc_t of
// their type.
// Views: any layout, managed or unmanaged, subviews.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/views.hpp"

namespace tptrain::kernels {

// y(t, :) = wte(tok - vocab_start, :) if vocab_start <= tok < vocab_start + Vl, else 0
// (overwritten).
template <class Exec, class TV, class WV, class YV>
void embedding_forward_masked(const Exec& exec,
                              const TV& tokens,  // [N] token ids
                              const WV& wte,     // [Vl, H] local vocabulary rows
                              const std::int64_t vocab_start,
                              const YV& y) {  // [N, H] out (overwritten)
  detail::check_view<Exec, TV, 1>();
  detail::check_view<Exec, WV, 2>();
  detail::check_view<Exec, YV, 2>();
  detail::check_writable<YV>();
  detail::require(tokens.extent(0) == y.extent(0) && wte.extent(1) == y.extent(1),
                  "embedding_forward_masked", "shapes must be tokens[N], wte[Vl,H], y[N,H]");
  using T = typename YV::non_const_value_type;
  const std::int64_t vl = wte.extent(0);
  Kokkos::parallel_for(
      "tptrain::kernels::embedding_forward_masked", detail::range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t t, const std::int64_t h) {
        const std::int64_t row = static_cast<std::int64_t>(tokens(t)) - vocab_start;
        y(t, h) = (row >= 0 && row < vl) ? kx::convert_to<T>(wte(row, h)) : T(0);
      });
}

// y(t, :) += wpe((first_row + t) % S, :). y is rows [first_row, first_row + rows) of the
// [B*S, H] token rows (a sequence-parallel shard; all of them by default). positions (may be
// empty): the position id of each of the B*S rows (each < S), used instead of the row's place
// (documents whose positions restart, data.reset_positions).
template <class Exec, class PV, class YV>
void position_embedding_add(const Exec& exec,
                            const PV& wpe,  // [S_max >= S, H] position rows
                            const std::int64_t S,
                            const YV& y,    // [rows, H] in/out
                            const std::int64_t first_row = 0, const Tokens& positions = Tokens()) {
  detail::check_view<Exec, PV, 2>();
  detail::check_view<Exec, YV, 2>();
  detail::check_writable<YV>();
  detail::require(S > 0 && wpe.extent(0) >= static_cast<std::size_t>(S) &&
                      wpe.extent(1) == y.extent(1) && first_row >= 0,
                  "position_embedding_add", "shapes must be wpe[>=S,H], y[rows,H], first_row >= 0");
  detail::require(positions.size() == 0 || positions.extent(0) >= first_row + y.extent(0), "position_embedding_add",
                  "positions must hold a position for every row");
  const bool given = positions.size() > 0;
  Kokkos::parallel_for(
      "tptrain::kernels::position_embedding_add", detail::range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t t, const std::int64_t h) {
        y(t, h) += wpe(given ? std::int64_t(positions(first_row + t)) : (first_row + t) % S, h);
      });
}

// The token positions of a micro-batch grouped by token id, for a word-embedding backward that
// is parallel over tokens (one team per distinct id) and still deterministic. Token ids are on
// the host before the batch is uploaded, so the grouping is a host sort (N log N, N = B·S):
//   order[p]            positions t, sorted by (token id, t): each id's positions ascending
//   segment_start[u]    segment u (the u-th distinct id, ascending) is
//                       order[segment_start[u] .. segment_start[u+1])
//   segment_token[u]    its token id
// Device views of capacity N, host staging of the same size (kx::StagingSpace: pinned on CUDA,
// so that the uploads are asynchronous DMA; on host backends the device views themselves):
// build allocates only when a batch is larger than any before.
struct TokenSegments {
  using IndexView = Kokkos::View<std::int64_t*, kx::MemSpace>;
  using TokenView = Kokkos::View<int*, kx::MemSpace>;
  // The host staging: the device views themselves where the host reads them (a host execution
  // space, also in a CUDA build), pinned memory otherwise.
  using Staging = std::conditional_t<Kokkos::SpaceAccessibility<Kokkos::HostSpace, kx::MemSpace>::accessible,
                                     kx::MemSpace, kx::StagingSpace>;
  IndexView order;            // [capacity]
  IndexView segment_start;    // [capacity + 1]
  TokenView segment_token;    // [capacity]
  std::int64_t tokens = 0;    // N of the last build
  std::int64_t segments = 0;  // distinct ids U of the last build

  explicit TokenSegments(const std::int64_t n_max = 0) { reserve(n_max); }

  std::int64_t capacity() const { return static_cast<std::int64_t>(order.extent(0)); }

  void reserve(const std::int64_t n_max) {
    detail::require(n_max >= 0, "TokenSegments", "negative capacity");
    if (segment_start.extent(0) > 0 && n_max <= capacity()) return;
    const auto n = static_cast<std::size_t>(n_max);
    order = IndexView(Kokkos::view_alloc(Kokkos::WithoutInitializing, "tokens.order"), n);
    segment_start =
        IndexView(Kokkos::view_alloc(Kokkos::WithoutInitializing, "tokens.segment_start"), n + 1);
    segment_token =
        TokenView(Kokkos::view_alloc(Kokkos::WithoutInitializing, "tokens.segment_token"), n);
    h_order = Kokkos::create_mirror_view(Staging(), order);
    h_segment_start = Kokkos::create_mirror_view(Staging(), segment_start);
    h_segment_token = Kokkos::create_mirror_view(Staging(), segment_token);
  }

  // Groups host_tokens[0, n) and uploads the result on exec, stream-ordered. On host backends
  // the staging arrays are the device views themselves, which a previous backward may still
  // read: exec is fenced first (a no-op for Serial and OpenMP, whose kernels have finished when
  // they return). On a GPU they are pinned host memory that the asynchronous copies read
  // later: the caller must not build again into the same TokenSegments before the copies of
  // the previous build are done (train::MicroBatchQueue waits for an event recorded after them;
  // docs/design.md, "Host waits").
  template <class Exec>
  void build(const Exec& exec, const int* host_tokens, const std::int64_t n) {
    detail::require(n >= 0 && (n == 0 || host_tokens != nullptr), "TokenSegments::build",
                    "need n >= 0 host token ids");
    if (Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename IndexView::memory_space>::accessible)
      kx::fence(exec, "tptrain::kernels::TokenSegments::build: staging free");
    reserve(n);
    std::int64_t* pos = h_order.data();
    for (std::int64_t t = 0; t < n; ++t) pos[t] = t;
    // (id, position) is a total order: the result does not depend on the sort algorithm.
    std::sort(pos, pos + n, [host_tokens](const std::int64_t a, const std::int64_t b) {
      return host_tokens[a] < host_tokens[b] || (host_tokens[a] == host_tokens[b] && a < b);
    });
    std::int64_t u = 0;
    for (std::int64_t p = 0; p < n; ++p) {
      if (p == 0 || host_tokens[pos[p]] != host_tokens[pos[p - 1]]) {
        h_segment_start(u) = p;
        h_segment_token(u) = host_tokens[pos[p]];
        ++u;
      }
    }
    h_segment_start(u) = n;
    tokens = n;
    segments = u;
    using Span = Kokkos::pair<std::int64_t, std::int64_t>;
    Kokkos::deep_copy(exec, Kokkos::subview(order, Span(0, n)),
                      Kokkos::subview(h_order, Span(0, n)));
    Kokkos::deep_copy(exec, Kokkos::subview(segment_start, Span(0, u + 1)),
                      Kokkos::subview(h_segment_start, Span(0, u + 1)));
    Kokkos::deep_copy(exec, Kokkos::subview(segment_token, Span(0, u)),
                      Kokkos::subview(h_segment_token, Span(0, u)));
  }

 private:
  Kokkos::View<std::int64_t*, Staging> h_order, h_segment_start;
  Kokkos::View<int*, Staging> h_segment_token;
};

// dwte(tok - vocab_start, h) += Σ_{t: tokens(t) = tok} dy(t, h) for the ids in this rank's range
// (accumulated), with the positions grouped by `segments` (built from the same tokens).
// One team per distinct id, its threads over blocks of CB columns (detail::ColumnBlock); each
// thread sums the id's positions in ascending order, then adds to dwte once: no atomics,
// bitwise reproducible for any team size and CB. O(N·H) work, parallel over ids and columns.
template <class Exec, class DYV, class DWV, int CB = detail::ColumnBlock<Exec>::value>
void embedding_backward_masked(const Exec& exec,
                               const TokenSegments& segments,  // of the N token ids
                               const DYV& dy,                  // [N, H]
                               const std::int64_t vocab_start,
                               const DWV& dwte) {  // [Vl, H] accumulated
  using IV = TokenSegments::IndexView;
  using TV = TokenSegments::TokenView;
  detail::check_view<Exec, IV, 1>();
  detail::check_view<Exec, TV, 1>();
  detail::check_view<Exec, DYV, 2>();
  detail::check_view<Exec, DWV, 2>();
  detail::check_writable<DWV>();
  static_assert(CB >= 1, "column block must be positive");
  detail::require(segments.tokens == static_cast<std::int64_t>(dy.extent(0)) &&
                      dwte.extent(1) == dy.extent(1),
                  "embedding_backward_masked",
                  "shapes must be segments of N tokens, dy[N,H], dwte[Vl,H]");
  using T = kx::acc_t<typename DWV::non_const_value_type>;
  using member = typename detail::Teams<Exec>::member_type;
  const std::int64_t vl = dwte.extent(0);
  const std::int64_t cols = dy.extent(1);
  const std::int64_t nblk = detail::ceil_div(cols, CB);
  const IV order = segments.order;
  const IV start = segments.segment_start;
  const TV token = segments.segment_token;
  Kokkos::parallel_for(
      "tptrain::kernels::embedding_backward_segments",
      detail::teams(exec, segments.segments, "embedding_backward_masked"),
      KOKKOS_LAMBDA(const member& team) {
        const std::int64_t u = team.league_rank();
        const std::int64_t row = static_cast<std::int64_t>(token(u)) - vocab_start;
        if (row < 0 || row >= vl) return;  // another rank's vocabulary block
        const std::int64_t p0 = start(u);
        const std::int64_t p1 = start(u + 1);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nblk), [&](const std::int64_t blk) {
          const std::int64_t h0 = blk * CB;
          const int nh = static_cast<int>(kx::min<std::int64_t>(CB, cols - h0));
          T sum[CB];
          for (int c = 0; c < CB; ++c) sum[c] = 0;
          for (std::int64_t p = p0; p < p1; ++p) {
            const std::int64_t t = order(p);
            for (int c = 0; c < nh; ++c) sum[c] += dy(t, h0 + c);
          }
          for (int c = 0; c < nh; ++c) dwte(row, h0 + c) += sum[c];
        });
      });
}

// dwpe(s, h) += Σ_b dy(b*S + s, h), batches summed in order, then added once (accumulated).
template <class Exec, class DYV, class DPV>
void position_embedding_backward(const Exec& exec,
                                 const DYV& dy,  // [N = B*S, H]
                                 const std::int64_t S,
                                 const DPV& dwpe) {  // [S_max >= S, H] accumulated (rows < S)
  detail::check_view<Exec, DYV, 2>();
  detail::check_view<Exec, DPV, 2>();
  detail::check_writable<DPV>();
  detail::require(S > 0 && dwpe.extent(0) >= static_cast<std::size_t>(S) &&
                      dwpe.extent(1) == dy.extent(1) &&
                      dy.extent(0) % static_cast<std::size_t>(S) == 0,
                  "position_embedding_backward", "shapes must be dy[B*S,H], dwpe[>=S,H]");
  using T = kx::acc_t<typename DPV::non_const_value_type>;
  const std::int64_t nb = dy.extent(0) / S;
  Kokkos::parallel_for(
      "tptrain::kernels::position_embedding_backward", detail::range2d(exec, S, dy.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t s, const std::int64_t h) {
        T sum = 0;
        for (std::int64_t b = 0; b < nb; ++b) sum += dy(b * S + s, h);
        dwpe(s, h) += sum;
      });
}

}  // namespace tptrain::kernels
