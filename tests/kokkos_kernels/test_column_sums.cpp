// Two-stage column sums (kokkos_kernels/column_sums.hpp) and the kernels built on them:
// against double references, against a host replay of the documented summation order (bitwise:
// the order depends on N only, so any thread count, team size or backend gives these bits),
// accumulation, workspace handling, and bitwise agreement across team sizes and column blocks.
#include <algorithm>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <streambuf>
#include <string>
#include <type_traits>

#include "catch.hpp"
#include "kokkos_kernels/bias.hpp"
#include "kokkos_kernels/column_sums.hpp"
#include "kokkos_kernels/embedding.hpp"
#include "kokkos_kernels/layernorm.hpp"
#include "reference.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

using Exec = tptrain::kx::ExecSpace;

namespace {

using tptrain::kernels::test::TeamSizeGuard;

// What is written to std::cerr while it lives. Kokkos 4 reports a policy built from a negative
// or wrapped-around extent there ("Kokkos::RangePolicy bounds error", "... bound type error")
// and then runs it as an empty range, so that only this makes such a policy fail a test: every
// case below ends with CHECK(reports.text() == "").
class CerrCapture {
 public:
  CerrCapture() : saved_(std::cerr.rdbuf(captured_.rdbuf())) {}
  ~CerrCapture() { std::cerr.rdbuf(saved_); }
  CerrCapture(const CerrCapture&) = delete;
  CerrCapture& operator=(const CerrCapture&) = delete;
  std::string text() const { return captured_.str(); }

 private:
  std::ostringstream captured_;  // (constructed before saved_ takes its buffer)
  std::streambuf* saved_;
};

// The documented order in T: chunk c sums its rows from 0 in row order; a column's total is
// chunk 0's sum plus the others in chunk order; then out += total.
template <class T>
tt::HostVec replay_column_sum(const tt::HostVec& x, const tt::HostVec& out0, std::int64_t n,
                              std::int64_t cols) {
  tt::HostVec out = out0;
  const std::int64_t rows = tk::column_sum_chunk_rows(n);
  const std::int64_t chunks = tk::column_sum_chunks(n);
  for (std::int64_t j = 0; j < cols; ++j) {
    if (chunks == 0) continue;
    T total = 0;
    for (std::int64_t c = 0; c < chunks; ++c) {
      T partial = 0;
      for (std::int64_t i = c * rows; i < std::min(n, (c + 1) * rows); ++i)
        partial += static_cast<T>(x[i * cols + j]);
      total = c == 0 ? partial : static_cast<T>(total + partial);
    }
    out[j] = static_cast<double>(static_cast<T>(static_cast<T>(out0[j]) + total));
  }
  return out;
}

}  // namespace

TEST_CASE("column sum chunking depends on N only and bounds the workspace", "[kernels]") {
  CHECK(tk::column_sum_chunks(0) == 0);
  CHECK(tk::column_sums_workspace_size(0, 100, 2) == 0);
  CHECK(tk::column_sum_chunks(1) == 1);
  CHECK(tk::column_sum_chunks(64) == 1);
  CHECK(tk::column_sums_workspace_size(64, 100) == 0);  // one chunk: no stage 2
  CHECK(tk::column_sum_chunks(65) == 2);
  CHECK(tk::column_sums_workspace_size(65, 100, 2) == 2 * 2 * 100 + 100);  // partials + one count per column
  CHECK(tk::column_sum_chunk_rows(8192) == 64);
  CHECK(tk::column_sum_chunks(8192) == 128);
  for (std::int64_t n : {std::int64_t(1), std::int64_t(16384), std::int64_t(16385),
                         std::int64_t(1) << 20, (std::int64_t(1) << 31) + 7}) {
    INFO("n = " << n);
    const std::int64_t rows = tk::column_sum_chunk_rows(n), chunks = tk::column_sum_chunks(n);
    CHECK(rows >= 64);
    CHECK(chunks <= 256);
    CHECK(chunks * rows >= n);        // every row in a chunk
    CHECK((chunks - 1) * rows < n);   // no empty chunk
  }
}

TEMPLATE_TEST_CASE("column_sum matches a double reference and its documented order", "[kernels]",
                   float, double) {
  CerrCapture reports;  // (checked at the end)
  using T = TestType;
  using M = tk::Matrix<T>;
  using V = tk::Vector<T>;
  Exec exec;
  // N: below one chunk, exactly one, one row over, not a multiple of 64, larger chunks
  // (16385 rows: 65 per chunk, 253 chunks). cols: one column, a partial column block, several.
  const auto [N, C] = GENERATE(std::make_pair(0, 5), std::make_pair(1, 1), std::make_pair(37, 150),
                               std::make_pair(64, 70), std::make_pair(65, 1),
                               std::make_pair(200, 150), std::make_pair(1000, 300),
                               std::make_pair(16385, 3));
  INFO("N=" << N << " cols=" << C);
  std::mt19937 rng(7);
  const auto hx = tt::random_vec<T>(rng, static_cast<std::size_t>(N) * C);
  const auto h0 = tt::random_vec<T>(rng, C);
  auto x = tt::to_device<T>(hx, N, C);

  tt::HostVec ref = h0;
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < C; ++j) ref[j] += hx[static_cast<std::size_t>(i) * C + j];
  const auto replay = replay_column_sum<T>(hx, h0, N, C);

  auto out = tt::to_device<T>(h0);
  tk::column_sum(exec, x, out);  // workspace allocated inside
  const auto got = tt::to_host(out);
  CHECK(tt::max_rel_err(got, ref, tt::max_abs(h0)) < tt::tol<T>() * (1 + N / 1000));
  CHECK(tt::bitwise_equal(got, replay));

  // Caller-provided workspace, oversized, all but its counts dirty (the counts, the last C
  // elements when there are two or more chunks and none otherwise, start at 0 as a new View's
  // do): the same bits, and the counts are 0 again afterwards. (The dirty range is sized from
  // column_sums_counts_size: ws_size - C wrapped around as a size_t for one chunk and C > 17,
  // which Kokkos 4 reported as a RangePolicy bounds error in deep_copy.)
  const std::size_t ws_size = static_cast<std::size_t>(tk::column_sums_workspace_size(N, C) + 17);
  const std::size_t counts = static_cast<std::size_t>(tk::column_sums_counts_size(N, C));
  REQUIRE(counts <= ws_size);
  V ws("ws", ws_size);
  Kokkos::deep_copy(Kokkos::subview(ws, std::make_pair(std::size_t(0), ws_size - counts)), T(1e30));
  auto out2 = tt::to_device<T>(h0);
  tk::column_sum(exec, x, out2, ws);
  CHECK(tt::bitwise_equal(tt::to_host(out2), got));
  const auto hws = tt::to_host(ws);
  for (std::size_t i = ws_size - counts; i < ws_size; ++i) CHECK(hws[i] == 0.0);

  // One column per work item (the GPU loop structure): the same bits.
  auto out3 = tt::to_device<T>(h0);
  tk::column_sum<Exec, M, V, V, 1>(exec, x, out3, ws);
  CHECK(tt::bitwise_equal(tt::to_host(out3), got));

  // bias_backward is this column sum.
  auto db = tt::to_device<T>(h0);
  tk::bias_backward(exec, x, db, ws);
  CHECK(tt::bitwise_equal(tt::to_host(db), got));
  CHECK(reports.text() == "");  // no Kokkos report of a bad policy (CerrCapture)
}

TEST_CASE("column sums refuse a short workspace before touching the output", "[kernels]") {
  CerrCapture reports;  // (checked at the end)
  using T = float;
  Exec exec;
  std::mt19937 rng(8);
  const int N = 130, C = 9;  // 3 chunks
  auto dy = tt::to_device<T>(tt::random_vec<T>(rng, N * C), N, C);
  const auto h0 = tt::random_vec<T>(rng, C);
  auto db = tt::to_device<T>(h0);
  tk::Vector<T> short_ws("ws", static_cast<std::size_t>(tk::column_sums_workspace_size(N, C) - 1));
  CHECK_THROWS_AS(tk::bias_backward(exec, dy, db, short_ws), std::invalid_argument);
  auto x = tt::to_device<T>(tt::random_vec<T>(rng, N * C), N, C);
  tk::Vector<T> mean("mean", N), rstd("rstd", N), dbeta("dbeta", C);
  tk::Matrix<T> dx("dx", N, C);
  tk::Vector<T> ln_ws("ws", static_cast<std::size_t>(tk::column_sums_workspace_size(N, C, 2) - 1));
  CHECK_THROWS_AS(tk::layernorm_backward(exec, dy, x, db, mean, rstd, dx, db, dbeta, ln_ws),
                  std::invalid_argument);
  CHECK(tt::bitwise_equal(tt::to_host(db), h0));
  CHECK(reports.text() == "");  // no Kokkos report of a bad policy (CerrCapture)
}

TEMPLATE_TEST_CASE("layernorm parameter gradients over many chunks", "[kernels]", float, double) {
  CerrCapture reports;  // (checked at the end)
  using T = TestType;
  using M = tk::Matrix<T>;
  using V = tk::Vector<T>;
  Exec exec;
  const auto [N, H] = GENERATE(std::make_pair(0, 7), std::make_pair(3, 70), std::make_pair(64, 5),
                               std::make_pair(129, 70), std::make_pair(700, 33));
  INFO("N=" << N << " H=" << H);
  const double eps = 1e-5;
  std::mt19937 rng(9);
  const auto hx = tt::random_vec<T>(rng, static_cast<std::size_t>(N) * H, -2.0, 3.0);
  const auto hg = tt::random_vec<T>(rng, H, 0.5, 1.5);
  const auto hdy = tt::random_vec<T>(rng, static_cast<std::size_t>(N) * H);
  const auto hdg0 = tt::random_vec<T>(rng, H);
  const auto hdb0 = tt::random_vec<T>(rng, H);
  auto x = tt::to_device<T>(hx, N, H);
  auto g = tt::to_device<T>(hg);
  auto dy = tt::to_device<T>(hdy, N, H);
  M y("y", N, H), dx("dx", N, H);
  V mean("mean", N), rstd("rstd", N);
  tk::layernorm_forward(exec, x, g, g, y, mean, rstd, T(eps));

  auto dg = tt::to_device<T>(hdg0);
  auto db = tt::to_device<T>(hdb0);
  tk::layernorm_backward(exec, dy, x, g, mean, rstd, dx, dg, db);
  const auto rb = tk::ref::layernorm_backward(hdy, hx, hg, N, H, eps);
  tt::HostVec ref_dg = hdg0, ref_db = hdb0;
  for (int j = 0; j < H; ++j) {
    ref_dg[j] += rb.dgamma[j];
    ref_db[j] += rb.dbeta[j];
  }
  const auto got_dg = tt::to_host(dg), got_db = tt::to_host(db);
  CHECK(tt::max_rel_err(got_dg, ref_dg, tt::max_abs(hdg0)) < tt::tol<T>());
  CHECK(tt::max_rel_err(got_db, ref_db, tt::max_abs(hdb0)) < tt::tol<T>());
  // dβ is a plain column sum of dy: the documented order, bitwise.
  CHECK(tt::bitwise_equal(got_db, replay_column_sum<T>(hdy, hdb0, N, H)));

  // Caller workspace, CB = 1, and every team size: the same bits.
  V ws("ws", static_cast<std::size_t>(tk::column_sums_workspace_size(N, H, 2)));
  for (const int ts : tt::team_sizes(exec)) {
    INFO("team size " << ts);
    TeamSizeGuard guard(ts);
    auto dg2 = tt::to_device<T>(hdg0);
    auto db2 = tt::to_device<T>(hdb0);
    M dx2("dx2", N, H);
    tk::layernorm_backward<Exec, M, M, V, V, V, M, V, V, V, 1>(exec, dy, x, g, mean, rstd, dx2,
                                                               dg2, db2, ws);
    CHECK(tt::bitwise_equal(tt::to_host(dg2), got_dg));
    CHECK(tt::bitwise_equal(tt::to_host(db2), got_db));
    CHECK(tt::max_rel_err(tt::to_host(dx2), rb.dx, 1.0) < tt::tol<T>());
  }
  CHECK(reports.text() == "");  // no Kokkos report of a bad policy (CerrCapture)
}

TEMPLATE_TEST_CASE("token-segment embedding backward over a vocabulary split", "[kernels]", float,
                   double) {
  CerrCapture reports;  // (checked at the end)
  using T = TestType;
  using M = tk::Matrix<T>;
  Exec exec;
  const int V = 50, H = 70;  // H > 64: a full and a partial column block
  const int N = GENERATE(0, 1, 9, 300);
  INFO("N=" << N);
  std::mt19937 rng(10);
  std::vector<int> htok(N);
  std::uniform_int_distribution<int> skewed(0, 3 * V);
  for (auto& t : htok) t = std::min(skewed(rng), V - 1);  // id V-1 repeated ~2/3 of the time
  const auto hdy = tt::random_vec<T>(rng, static_cast<std::size_t>(N) * H);
  auto dy = tt::to_device<T>(hdy, N, H);

  tk::TokenSegments seg(4);  // smaller than N: build grows it
  seg.build(exec, htok.data(), N);
  REQUIRE(seg.tokens == N);
  {  // the documented grouping
    const auto order = tt::to_host(seg.order), start = tt::to_host(seg.segment_start),
               token = tt::to_host(seg.segment_token);
    std::vector<int> distinct = htok;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    REQUIRE(seg.segments == static_cast<std::int64_t>(distinct.size()));
    CHECK(start[0] == 0);
    CHECK(start[seg.segments] == N);
    for (std::int64_t u = 0; u < seg.segments; ++u) {
      CHECK(token[u] == distinct[u]);
      for (auto p = static_cast<std::int64_t>(start[u]); p < start[u + 1]; ++p) {
        CHECK(htok[static_cast<std::size_t>(order[p])] == distinct[u]);
        if (p > start[u]) CHECK(order[p - 1] < order[p]);
      }
    }
  }

  const int parts = 3, Vl = (V + parts - 1) / parts;
  const auto hd0 = tt::random_vec<T>(rng, static_cast<std::size_t>(parts) * Vl * H);
  tt::HostVec ref = hd0;  // [parts · Vl, H]: rank r's block at rows r·Vl
  for (int t = 0; t < N; ++t)
    for (int h = 0; h < H; ++h) ref[static_cast<std::size_t>(htok[t]) * H + h] += hdy[t * H + h];
  tt::HostVec got(hd0.size());
  for (int r = 0; r < parts; ++r) {
    const tt::HostVec shard0(hd0.begin() + r * Vl * H, hd0.begin() + (r + 1) * Vl * H);
    auto dw = tt::to_device<T>(shard0, Vl, H);
    tk::embedding_backward_masked(exec, seg, dy, r * Vl, dw);
    const auto hdw = tt::to_host(dw);
    std::copy(hdw.begin(), hdw.end(), got.begin() + r * Vl * H);

    // The per-column loop of the old kernel sums the same positions in the same order, but
    // into dwte directly: close, not bitwise. Every team size and CB = 1: bitwise.
    for (const int ts : tt::team_sizes(exec)) {
      INFO("rank " << r << " team size " << ts);
      TeamSizeGuard guard(ts);
      auto dw2 = tt::to_device<T>(shard0, Vl, H);
      tk::embedding_backward_masked<Exec, M, M, 1>(exec, seg, dy, r * Vl, dw2);
      CHECK(tt::bitwise_equal(tt::to_host(dw2), hdw));
    }
  }
  CHECK(tt::max_rel_err(got, ref, tt::max_abs(hd0)) < tt::tol<T>() * (1 + N / 100));

  // A rebuild for a smaller batch reuses the views; a mismatched dy is refused.
  if (N > 1) {
    seg.build(exec, htok.data(), N - 1);
    CHECK(seg.tokens == N - 1);
    M dw("dw", V, H);
    CHECK_THROWS_AS(tk::embedding_backward_masked(exec, seg, dy, 0, dw), std::invalid_argument);
  }
  CHECK(reports.text() == "");  // no Kokkos report of a bad policy (CerrCapture)
}

TEST_CASE("kernel policies refuse a negative extent before Kokkos sees it", "[kernels]") {
  CerrCapture reports;
  Exec exec;
  CHECK_THROWS_AS(tk::detail::range(exec, -133), std::invalid_argument);
  CHECK_THROWS_AS(tk::detail::range2d(exec, 4, -1), std::invalid_argument);
  CHECK_THROWS_AS(tk::detail::range2d(exec, -1, 4), std::invalid_argument);
  CHECK(tk::detail::range(exec, 0).end() == 0);
  CHECK(reports.text() == "");
}
