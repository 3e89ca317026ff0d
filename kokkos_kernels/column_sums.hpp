// Deterministic column sums over the rows of an [N, cols] operand, spread over every thread:
//   out_k(j) += Σ_i s_k(i, j),  k < K   (bias: s = dy; LayerNorm: s = (dy·x̂, dy))
// Two stages in one launch:
//   1. the N rows are cut into chunks of column_sum_chunk_rows(N) rows; one work item per
//      (chunk, column block) sums its rows in row order into partial[k, chunk, j];
//   2. the work item that finishes a column block LAST (an atomic count per column block: each
//      item fences its partials, then counts itself in) sums that block's partials in chunk order
//      and adds the total to out, then sets the count back to 0 for the next call.
// Which item is last varies, what it computes does not: the totals are the same expression
// (chunk 0 + chunk 1 + ... in order) whichever item runs them, and the chunking depends on N
// only, never on the thread count or backend, and each column is summed in the same order
// whatever the column block CB (detail::ColumnBlock), so results are bitwise identical for any
// number of threads, team size, CB and backend. A single chunk (N <= 64) needs no second stage
// and no workspace. (Two launches, partials then totals, did the same with one more launch per
// bias or LayerNorm gradient: issue 22's launch budget.)
// The sums run in Op::value_type (acc_t of the output: float when a 16-bit dy is summed into a
// float db). The partials and the counts live in a caller-provided workspace of that type (rank
// 1, >= column_sums_workspace_size elements) so that a training loop allocates nothing: the
// partials at its start, the counts (small integers, exact in float) in its last `cols`
// elements, which must be 0 before the first call (a new View is) and which every call leaves 0.
// One workspace serves calls of different shapes when it holds the largest partials plus the
// largest column count (column_sums_shared_workspace_size): then no call's partials reach any
// call's counts. The overloads without a workspace allocate one.
#pragma once

#include <string>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

// Rows per chunk: 64 (enough work per item to amortise the partial store; N/64 chunks keep a
// GPU busy at N = 1024), growing with N beyond 64·256 rows so that there are at most 256
// chunks: stage 2 then reads at most 256 partials per column, and the workspace stays below
// 256·cols·K elements.
inline std::int64_t column_sum_chunk_rows(std::int64_t n) {
  constexpr std::int64_t min_rows = 64;
  constexpr std::int64_t max_chunks = 256;
  const std::int64_t rows = detail::ceil_div(n, max_chunks);
  return rows > min_rows ? rows : min_rows;
}

inline std::int64_t column_sum_chunks(std::int64_t n) {
  return n > 0 ? detail::ceil_div(n, column_sum_chunk_rows(n)) : 0;
}

// Workspace elements column sums of K terms over [n, cols] need (0 when one chunk suffices):
// the partials, then one count per column.
inline std::int64_t column_sums_partials_size(std::int64_t n, std::int64_t cols, int terms = 1) {
  const std::int64_t chunks = column_sum_chunks(n);
  return chunks > 1 ? chunks * cols * terms : 0;
}
inline std::int64_t column_sums_counts_size(std::int64_t n, std::int64_t cols) {
  return column_sum_chunks(n) > 1 ? cols : 0;
}
inline std::int64_t column_sums_workspace_size(std::int64_t n, std::int64_t cols, int terms = 1) {
  return column_sums_partials_size(n, cols, terms) + column_sums_counts_size(n, cols);
}

// out_k(j) += Σ_{i<n} s_k(i, j) for K = Op::terms sums per column. Op is a copyable functor:
//   using value_type = T;  static constexpr int terms = K;
//   KOKKOS_INLINE_FUNCTION void summands(std::int64_t i, std::int64_t j, T (&s)[K]) const;
//   KOKKOS_INLINE_FUNCTION void accumulate(std::int64_t j, const T (&sum)[K]) const;  // out += sum
// `label` names the launch (tptrain::kernels::<label>).
template <class Exec, class Op, class WV, int CB = detail::ColumnBlock<Exec>::value>
void column_sums(const Exec& exec, const char* label, const std::int64_t n,
                 const std::int64_t cols, const Op& op, const WV& workspace) {
  detail::check_view<Exec, WV, 1>();
  detail::check_writable<WV>();
  static_assert(CB >= 1, "column block must be positive");
  using T = typename Op::value_type;
  constexpr int K = Op::terms;
  static_assert(K >= 1, "column_sums: at least one term");
  static_assert(std::is_same<typename WV::non_const_value_type, T>::value,
                "column_sums: workspace must hold the value type of the sums");
  detail::require(n >= 0 && cols >= 0, label, "negative extent");
  const std::int64_t needed = column_sums_workspace_size(n, cols, K);
  detail::require(static_cast<std::int64_t>(workspace.extent(0)) >= needed, label,
                  "workspace smaller than column_sums_workspace_size(n, cols, terms)");
  if (n == 0 || cols == 0) return;  // nothing to add

  const std::int64_t rows = column_sum_chunk_rows(n);
  const std::int64_t chunks = column_sum_chunks(n);
  const std::int64_t nblk = detail::ceil_div(cols, CB);
  // Counts at the workspace's end: one per column block (nblk <= cols of them).
  const std::int64_t counts = static_cast<std::int64_t>(workspace.extent(0)) - cols;
  // Item = chunk · nblk + block: adjacent items take adjacent columns (coalesced on a GPU,
  // CB = 1) and, on the host, contiguous runs of items cover contiguous rows.
  Kokkos::parallel_for(
      std::string("tptrain::kernels::") + label, detail::range(exec, chunks * nblk),
      KOKKOS_LAMBDA(const std::int64_t item) {
        const std::int64_t c = item / nblk;
        const std::int64_t blk = item % nblk;
        const std::int64_t j0 = blk * CB;
        const int nj = static_cast<int>(kx::min<std::int64_t>(CB, cols - j0));
        const std::int64_t i0 = c * rows;
        const std::int64_t i1 = kx::min<std::int64_t>(n, i0 + rows);
        T sum[K][CB];
        for (int k = 0; k < K; ++k)
          for (int b = 0; b < CB; ++b) sum[k][b] = 0;
        for (std::int64_t i = i0; i < i1; ++i)
          for (int b = 0; b < nj; ++b) {
            T s[K];
            op.summands(i, j0 + b, s);
            for (int k = 0; k < K; ++k) sum[k][b] += s[k];
          }
        if (chunks == 1) {
          for (int b = 0; b < nj; ++b) {
            T s[K];
            for (int k = 0; k < K; ++k) s[k] = sum[k][b];
            op.accumulate(j0 + b, s);
          }
          return;
        }
        for (int b = 0; b < nj; ++b)
          for (int k = 0; k < K; ++k) workspace((k * chunks + c) * cols + j0 + b) = sum[k][b];
        Kokkos::memory_fence();  // the partials are visible before this item counts itself in
        const T done = Kokkos::atomic_fetch_add(&workspace(counts + blk), T(1));
        if (done != T(chunks - 1)) return;
        // Last of its column block: every partial of it is written. Read them past any cache
        // that may hold an older line (volatile), in chunk order, starting from chunk 0 (so that
        // a column's total is the same expression for every CB).
        Kokkos::memory_fence();
        const volatile T* partial = workspace.data();
        for (int k = 0; k < K; ++k)
          for (int b = 0; b < CB; ++b) sum[k][b] = b < nj ? T(partial[k * chunks * cols + j0 + b]) : T(0);
        for (std::int64_t cc = 1; cc < chunks; ++cc)
          for (int k = 0; k < K; ++k)
            for (int b = 0; b < nj; ++b) sum[k][b] += T(partial[(k * chunks + cc) * cols + j0 + b]);
        for (int b = 0; b < nj; ++b) {
          T s[K];
          for (int k = 0; k < K; ++k) s[k] = sum[k][b];
          op.accumulate(j0 + b, s);
        }
        workspace(counts + blk) = T(0);  // ready for the next call (stream-ordered after this one)
      });
}

// The same, with a workspace allocated here (and a fence before it is freed).
template <class Exec, class Op, int CB = detail::ColumnBlock<Exec>::value>
void column_sums(const Exec& exec, const char* label, const std::int64_t n,
                 const std::int64_t cols, const Op& op) {
  using T = typename Op::value_type;
  const std::int64_t needed = column_sums_workspace_size(n < 0 ? 0 : n, cols < 0 ? 0 : cols,
                                                         Op::terms);
  Kokkos::View<T*, typename Exec::memory_space> workspace(  // zeroed: the counts start at 0
      Kokkos::view_alloc(exec, "tptrain::kernels::column_sums_workspace"), static_cast<std::size_t>(needed));
  column_sums<Exec, Op, decltype(workspace), CB>(exec, label, n, cols, op, workspace);
  if (needed > 0) kx::fence(exec, "tptrain::kernels::column_sums: free workspace");
}

namespace detail {

// s(i, j) = x(i, j), out(j) += Σ_i s(i, j), summed in acc_t of out (float for a 16-bit out).
template <class XV, class OV>
struct ColumnSumOp {
  using value_type = kx::acc_t<typename OV::non_const_value_type>;
  static constexpr int terms = 1;
  XV x;
  OV out;
  KOKKOS_INLINE_FUNCTION void summands(const std::int64_t i, const std::int64_t j,
                                       value_type (&s)[1]) const {
    s[0] = x(i, j);
  }
  KOKKOS_INLINE_FUNCTION void accumulate(const std::int64_t j, const value_type (&sum)[1]) const {
    out(j) += sum[0];
  }
};

template <class Exec, class XV, class OV>
void check_column_sum(const XV& x, const OV& out) {
  check_view<Exec, XV, 2>();
  check_view<Exec, OV, 1>();
  check_writable<OV>();
  require(out.extent(0) == x.extent(1), "column_sum", "out must have x.extent(1) entries");
}

}  // namespace detail

// out(j) += Σ_i x(i, j)   (x [N, cols], out [cols]; accumulated)
template <class Exec, class XV, class OV, class WV, int CB = detail::ColumnBlock<Exec>::value>
void column_sum(const Exec& exec, const XV& x, const OV& out, const WV& workspace) {
  detail::check_column_sum<Exec>(x, out);
  column_sums<Exec, detail::ColumnSumOp<XV, OV>, WV, CB>(
      exec, "column_sum", x.extent(0), x.extent(1), detail::ColumnSumOp<XV, OV>{x, out}, workspace);
}

template <class Exec, class XV, class OV, int CB = detail::ColumnBlock<Exec>::value>
void column_sum(const Exec& exec, const XV& x, const OV& out) {
  detail::check_column_sum<Exec>(x, out);
  column_sums<Exec, detail::ColumnSumOp<XV, OV>, CB>(exec, "column_sum", x.extent(0), x.extent(1),
                                                     detail::ColumnSumOp<XV, OV>{x, out});
}

}  // namespace tptrain::kernels
