// Ring attention (src/model/ring_attention.hpp) with the world as the context group (2 or 4 ranks
// under mpi_2 and mpi_4): every rank's rows of O, lse, dQ, dK and dV equal those of flash attention
// over the whole sequence on one rank (kokkos_kernels/flash_attention.hpp), with and without
// grouped-query attention and document masks, with chunks that cross the kernels' blocks. It holds
// the load-balanced chunk assignment (base/context_chunks.hpp), the merge of the partial softmaxes
// and the ring of dK and dV sums to the single-rank result.
#include <cmath>
#include <random>
#include <vector>

#include "catch.hpp"
#include "src/model/ring_attention.hpp"
#include "tests/mpi_test_util.hpp"

namespace tptrain {
namespace {

using Real = double;
using Exec = kx::ExecSpace;

kernels::Matrix<Real> random_matrix(std::int64_t rows, std::int64_t cols, unsigned seed) {
  kernels::Matrix<Real> m("m", rows, cols);
  auto h = Kokkos::create_mirror_view(m);
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) h(i, j) = n(rng);
  Kokkos::deep_copy(m, h);
  return m;
}

// The rows of `whole` [B·S, w] that context rank chunks.rank holds, [B·2c, w].
kernels::Matrix<Real> local_rows(const kernels::Matrix<Real>& whole, const ContextChunks& chunks, int B) {
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), whole);
  const std::int64_t L = chunks.local(), S = chunks.sequence, w = whole.extent(1);
  kernels::Matrix<Real> out("local", B * L, w);
  auto o = Kokkos::create_mirror_view(out);
  for (int b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < L; ++i)
      for (std::int64_t e = 0; e < w; ++e) o(b * L + i, e) = h(b * S + chunks.position(i), e);
  Kokkos::deep_copy(out, o);
  return out;
}

struct Case {
  int heads, kv_heads, chunk;
  bool documents;
};

void check_case(const Case& k, parallel::Communicator& cp) {
  const int C = cp.size(), B = 2, d = 8, nh = k.heads, nkv = k.kv_heads;
  const ContextChunks chunks{cp.rank(), C, std::int64_t(2) * C * k.chunk};
  const std::int64_t S = chunks.sequence, N = B * S, L = chunks.local(), W = (nh + 2 * nkv) * d;
  CAPTURE(C, nh, nkv, k.chunk, k.documents);
  const Exec exec;
  // The whole sequences, the same on every rank.
  const kernels::Matrix<Real> qkv = random_matrix(N, W, 11), dout = random_matrix(N, std::int64_t(nh) * d, 12);
  kernels::Tokens doc("doc", k.documents ? N : 0), local_doc("local_doc", k.documents ? B * L : 0);
  if (k.documents) {
    // Documents starting at fixed positions, some inside a chunk, one at a chunk's first row.
    auto h = Kokkos::create_mirror_view(doc);
    auto l = Kokkos::create_mirror_view(local_doc);
    for (int b = 0; b < B; ++b) {
      std::int32_t start = 0;
      for (std::int64_t i = 0; i < S; ++i) {
        if (i == k.chunk + 3 + b || i == 2 * k.chunk || i == S - 5) start = static_cast<std::int32_t>(i);
        h(b * S + i) = start;
      }
      for (std::int64_t i = 0; i < L; ++i) l(b * L + i) = h(b * S + chunks.position(i));
    }
    Kokkos::deep_copy(doc, h);
    Kokkos::deep_copy(local_doc, l);
  }
  // The reference: one rank, the whole sequences.
  kernels::Matrix<Real> out("out", N, std::int64_t(nh) * d), dqkv("dqkv", N, W), dq_sum("dq_sum", N, std::int64_t(nh) * d);
  kernels::Vector<Real> lse("lse", B * nh * S), delta("delta", B * nh * S);
  kernels::flash_attention_forward(exec, qkv, out, lse, B, S, nh, nkv, d, doc);
  kernels::flash_attention_backward(exec, dout, qkv, out, lse, dqkv, doc, dq_sum, delta, B, S, nh, nkv, d);

  // The ring.
  model::Workspace<Real> ws;
  model::RingAttention<Real> ring(chunks, B, nh, nkv, d, ws);
  const kernels::Matrix<Real> q_local = local_rows(qkv, chunks, B), do_local = local_rows(dout, chunks, B);
  kernels::Matrix<Real> ctx("ctx", B * L, std::int64_t(nh) * d), d_qkv("d_qkv", B * L, W),
      l_dq("l_dq", B * L, std::int64_t(nh) * d);
  kernels::Vector<Real> l_lse("l_lse", B * nh * L), l_delta("l_delta", B * nh * L);
  ring.forward(exec, cp, q_local, ctx, l_lse, local_doc);
  ring.backward(exec, cp, do_local, q_local, ctx, l_lse, d_qkv, local_doc, l_dq, l_delta);
  exec.fence();

  const auto ctx_want = local_rows(out, chunks, B), dqkv_want = local_rows(dqkv, chunks, B);
  const auto h_ctx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), ctx);
  const auto h_ctx_want = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), ctx_want);
  const auto h_d = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d_qkv);
  const auto h_d_want = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dqkv_want);
  const auto h_lse = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), l_lse);
  const auto h_lse_want = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  double worst_o = 0, worst_d = 0, worst_lse = 0;
  for (std::int64_t r = 0; r < B * L; ++r) {
    for (std::int64_t e = 0; e < std::int64_t(nh) * d; ++e)
      worst_o = std::max(worst_o, std::abs(h_ctx(r, e) - h_ctx_want(r, e)));
    for (std::int64_t e = 0; e < W; ++e) worst_d = std::max(worst_d, std::abs(h_d(r, e) - h_d_want(r, e)));
  }
  // lse: the ring's is chunk-major, [half][b][h][i].
  const std::int64_t c = chunks.chunk();
  for (int half = 0; half < 2; ++half)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < nh; ++h)
        for (std::int64_t i = 0; i < c; ++i) {
          const double got = h_lse(((half * B + b) * nh + h) * c + i);
          const double want = h_lse_want((b * nh + h) * S + chunks.position(half * c + i));
          worst_lse = std::max(worst_lse, std::abs(got - want));
        }
  CHECK(worst_o < 1e-12);
  CHECK(worst_lse < 1e-12);
  CHECK(worst_d < 1e-11);
}

TEST_CASE("ring attention over the context group equals flash attention of the whole sequence", "[mpi][ring]") {
  if (test::world_size() < 2) return;  // a ring needs two ranks (mpi_2, mpi_4)
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const std::unique_ptr<parallel::Communicator> cp = parallel::make_communicator(comm);
  for (const Case& k : {Case{4, 4, 8, false}, Case{4, 2, 8, true}, Case{2, 1, 72, true}, Case{4, 2, 40, false}})
    check_case(k, *cp);
}

// L = Σ w ∘ O over every rank's rows: the ring's dQ, dK and dV (at rows of both chunks, of the
// first and the last context rank, with documents) are L's central differences.
TEST_CASE("ring attention's gradients are finite differences of its output", "[mpi][ring]") {
  if (test::world_size() < 2) return;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const std::unique_ptr<parallel::Communicator> cp = parallel::make_communicator(comm);
  const int C = cp->size(), B = 1, d = 4, nh = 2, nkv = 1, c = 3;
  const ContextChunks chunks{cp->rank(), C, std::int64_t(2) * C * c};
  const std::int64_t S = chunks.sequence, L = chunks.local(), W = (nh + 2 * nkv) * d;
  const Exec exec;
  kernels::Matrix<Real> qkv = random_matrix(B * S, W, 21);
  const kernels::Matrix<Real> w = random_matrix(B * S, std::int64_t(nh) * d, 22), w_local = local_rows(w, chunks, B);
  kernels::Tokens doc("doc", B * L);
  {
    auto h = Kokkos::create_mirror_view(doc);
    for (std::int64_t i = 0; i < L; ++i) h(i) = chunks.position(i) >= c + 1 ? std::int32_t(c + 1) : 0;
    Kokkos::deep_copy(doc, h);
  }
  model::Workspace<Real> ws;
  model::RingAttention<Real> ring(chunks, B, nh, nkv, d, ws);
  kernels::Matrix<Real> ctx("ctx", B * L, std::int64_t(nh) * d), d_qkv("d_qkv", B * L, W),
      dq_sum("dq_sum", B * L, std::int64_t(nh) * d);
  kernels::Vector<Real> lse("lse", B * nh * L), delta("delta", B * nh * L);
  const auto loss = [&]() {
    ring.forward(exec, *cp, local_rows(qkv, chunks, B), ctx, lse, doc);
    exec.fence();
    const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), ctx);
    const auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w_local);
    double sum = 0;
    for (std::size_t i = 0; i < h.extent(0); ++i)
      for (std::size_t e = 0; e < h.extent(1); ++e) sum += hw(i, e) * h(i, e);
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum;
  };
  (void)loss();
  ring.backward(exec, *cp, w_local, local_rows(qkv, chunks, B), ctx, lse, d_qkv, doc, dq_sum, delta);
  exec.fence();
  const auto g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d_qkv);
  auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), qkv);
  // Rows: the first of the sequence, one inside a document that starts in another chunk, the last.
  for (const std::int64_t row : {std::int64_t(0), std::int64_t(c + 2), S - 1})
    for (const std::int64_t col : {std::int64_t(1), std::int64_t(nh) * d + 2, W - 1}) {  // Q, K, V
      double analytic = 0;  // held by the rank whose chunk has the row
      for (std::int64_t i = 0; i < L; ++i)
        if (chunks.position(i) == row) analytic = g(i, col);
      MPI_Allreduce(MPI_IN_PLACE, &analytic, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      const double x = hq(row, col), h = 1e-5;
      hq(row, col) = x + h;
      Kokkos::deep_copy(qkv, hq);
      const double up = loss();
      hq(row, col) = x - h;
      Kokkos::deep_copy(qkv, hq);
      const double down = loss();
      hq(row, col) = x;
      Kokkos::deep_copy(qkv, hq);
      const double numeric = (up - down) / (2 * h);
      INFO("row " << row << ", column " << col << ": analytic " << analytic << ", numeric " << numeric);
      CHECK(std::abs(analytic - numeric) <= 1e-7 * std::max(1.0, std::abs(numeric)));
    }
}

// The chunks: 2C of c tokens, rank r holding r and 2C - 1 - r; every position once over the ranks.
TEST_CASE("context chunks: rank r holds chunks r and 2C - 1 - r, every position once", "[ring]") {
  for (int C : {1, 2, 3, 4}) {
    const std::int64_t S = 2 * C * 5;
    std::vector<int> seen(static_cast<std::size_t>(S), 0);
    for (int r = 0; r < C; ++r) {
      const ContextChunks k{r, C, S};
      CHECK(k.local() == S / C);
      for (std::int64_t i = 0; i < k.local(); ++i) ++seen[static_cast<std::size_t>(k.position(i))];
      if (C > 1) {
        CHECK(k.position(0) == r * 5);
        CHECK(k.position(5) == (2 * C - 1 - r) * 5);
      }
    }
    for (int s : seen) CHECK(s == 1);
  }
}

}  // namespace
}  // namespace tptrain
