// Flash attention (kokkos_kernels/flash_attention.hpp) against a naive double reference: forward
// (O, lse) and backward (dQ, dK, dV) over causal and document masks, grouped-query attention with
// 1, 2 and 4 query heads per key/value head, S not a multiple of the 64-row block, S = 1, a long
// row (S = 8192), fp32, double, bf16 and fp16, teams of several threads, level-1 scratch, and
// query rows at an offset against a longer key range (the KV-cache step). The batched core
// (attention.hpp: its batched and causal-tile GEMM forms) against the same reference, with
// grouped-query attention and document masks.
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "catch.hpp"
#include "kokkos_kernels/attention.hpp"
#include "kokkos_kernels/flash_attention.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;
namespace kx = tptrain::kx;

namespace {

using Exec = kx::ExecSpace;

struct Case {
  int B, S, nh, nkv, d;
  bool documents;
};

// Document starts of each row: documents begin at the positions `starts` of every sequence
// (position 0 always begins one: the first, partial document).
std::vector<std::int32_t> document_starts(const Case& c, std::mt19937& rng) {
  std::vector<std::int32_t> doc(std::size_t(c.B) * c.S, 0);
  if (!c.documents) return doc;
  std::uniform_int_distribution<int> coin(0, 40);
  for (int b = 0; b < c.B; ++b) {
    int start = 0;
    for (int i = 0; i < c.S; ++i) {
      if (i > 0 && coin(rng) == 0) start = i;
      doc[std::size_t(b) * c.S + i] = start;
    }
  }
  return doc;
}

struct Reference {
  tt::HostVec out, lse, dq, dk, dv;
};

// Naive attention in double on host data laid out as the kernels take it.
Reference naive(const Case& c, const tt::HostVec& qkv, const tt::HostVec& dout, const std::vector<std::int32_t>& doc) {
  const int B = c.B, S = c.S, nh = c.nh, nkv = c.nkv, d = c.d, W = (nh + 2 * nkv) * d, group = nh / nkv;
  const double scale = 1.0 / std::sqrt(double(d));
  Reference r;
  r.out.assign(std::size_t(B) * S * nh * d, 0.0);
  r.lse.assign(std::size_t(B) * nh * S, 0.0);
  r.dq.assign(std::size_t(B) * S * nh * d, 0.0);
  r.dk.assign(std::size_t(B) * S * nkv * d, 0.0);
  r.dv.assign(std::size_t(B) * S * nkv * d, 0.0);
  auto Q = [&](int b, int h, int i, int e) { return qkv[(std::size_t(b) * S + i) * W + h * d + e]; };
  auto K = [&](int b, int g, int j, int e) { return qkv[(std::size_t(b) * S + j) * W + (nh + g) * d + e]; };
  auto V = [&](int b, int g, int j, int e) { return qkv[(std::size_t(b) * S + j) * W + (nh + nkv + g) * d + e]; };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < nh; ++h) {
      const int g = h / group;
      for (int i = 0; i < S; ++i) {
        const int lo = doc[std::size_t(b) * S + i];
        std::vector<double> s(i + 1, 0.0), p(i + 1, 0.0), dp(i + 1, 0.0);
        double mx = -1e300;
        for (int j = lo; j <= i; ++j) {
          for (int e = 0; e < d; ++e) s[j] += Q(b, h, i, e) * K(b, g, j, e);
          s[j] *= scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = lo; j <= i; ++j) sum += std::exp(s[j] - mx);
        r.lse[(std::size_t(b) * nh + h) * S + i] = mx + std::log(sum);
        const std::size_t orow = (std::size_t(b) * S + i) * nh * d + h * d;
        for (int j = lo; j <= i; ++j) {
          p[j] = std::exp(s[j] - mx) / sum;
          for (int e = 0; e < d; ++e) r.out[orow + e] += p[j] * V(b, g, j, e);
        }
        double D = 0;
        for (int j = lo; j <= i; ++j) {
          for (int e = 0; e < d; ++e) dp[j] += dout[orow + e] * V(b, g, j, e);
          D += p[j] * dp[j];
        }
        for (int j = lo; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - D);
          const std::size_t krow = (std::size_t(b) * S + j) * nkv * d + g * d;
          for (int e = 0; e < d; ++e) {
            r.dq[orow + e] += scale * ds * K(b, g, j, e);
            r.dk[krow + e] += scale * ds * Q(b, h, i, e);
            r.dv[krow + e] += p[j] * dout[orow + e];
          }
        }
      }
    }
  return r;
}

// Columns [c0, c0 + n) of a host [rows, W] matrix.
tt::HostVec columns(const tt::HostVec& m, std::size_t rows, std::size_t W, std::size_t c0, std::size_t n) {
  tt::HostVec out(rows * n);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < n; ++c) out[r * n + c] = m[r * W + c0 + c];
  return out;
}

// The document starts on the device (empty without documents).
Kokkos::View<std::int32_t*, kx::MemSpace> device_documents(const Case& c, const std::vector<std::int32_t>& doc_h) {
  Kokkos::View<std::int32_t*, kx::MemSpace> doc;
  if (!c.documents) return doc;
  doc = Kokkos::View<std::int32_t*, kx::MemSpace>("doc", doc_h.size());
  auto m = Kokkos::create_mirror_view(doc);
  for (std::size_t i = 0; i < doc_h.size(); ++i) m(i) = doc_h[i];
  Kokkos::deep_copy(doc, m);
  return doc;
}

struct Result {
  tt::HostVec out, lse, dq, dk, dv;
};

template <class T>
Result run_flash(const Case& c, const tt::HostVec& qkv_h, const tt::HostVec& dout_h,
                 const std::vector<std::int32_t>& doc_h, bool dout_in_dq = false) {
  using A = kx::acc_t<T>;
  const std::size_t N = std::size_t(c.B) * c.S, W = std::size_t(c.nh + 2 * c.nkv) * c.d, Hl = std::size_t(c.nh) * c.d;
  auto qkv = tt::to_device<T>(qkv_h, N, W);
  tk::Matrix<T> out("out", N, Hl);
  tk::Vector<A> lse("lse", N * c.nh);
  const auto doc = device_documents(c, doc_h);
  const Exec exec;
  tk::flash_attention_forward(exec, qkv, out, lse, c.B, c.S, c.nh, c.nkv, c.d, doc);
  tk::Matrix<T> dqkv("dqkv", N, W);
  Kokkos::View<A**, Kokkos::LayoutRight, kx::MemSpace> dq_sum("dq_sum", N, Hl);
  Kokkos::View<A*, kx::MemSpace> delta("delta", N * c.nh);
  if (dout_in_dq) {  // the model's aliasing: dO in the Q block of dqkv
    auto dq_block = Kokkos::subview(dqkv, Kokkos::ALL(), std::make_pair(std::size_t(0), Hl));
    Kokkos::deep_copy(dq_block, tt::to_device<T>(dout_h, N, Hl));
    tk::flash_attention_backward(exec, dq_block, qkv, out, lse, dqkv, doc, dq_sum, delta, c.B, c.S, c.nh, c.nkv, c.d);
  } else {
    auto dout = tt::to_device<T>(dout_h, N, Hl);
    tk::flash_attention_backward(exec, dout, qkv, out, lse, dqkv, doc, dq_sum, delta, c.B, c.S, c.nh, c.nkv, c.d);
  }
  Kokkos::fence();
  const tt::HostVec g = tt::to_host(dqkv);
  const std::size_t kvl = std::size_t(c.nkv) * c.d;
  return {tt::to_host(out), tt::to_host(lse), columns(g, N, W, 0, Hl), columns(g, N, W, Hl, kvl),
          columns(g, N, W, Hl + kvl, kvl)};
}

// The batched core on one of its GEMM forms (batched or causal tiles), dO in dqkv's Q block as
// the model places it, optionally keeping the scores (recompute = none); the workspaces start as
// NaN (nothing may be read before it is written).
template <class T>
Result run_batched_core(const Case& c, const tt::HostVec& qkv_h, const tt::HostVec& dout_h,
                        const std::vector<std::int32_t>& doc_h, tk::AttentionPath path, bool keep) {
  using A = kx::acc_t<T>;
  const tk::AttentionPathScope scope(path);
  const std::size_t N = std::size_t(c.B) * c.S, W = std::size_t(c.nh + 2 * c.nkv) * c.d, Hl = std::size_t(c.nh) * c.d;
  auto qkv = tt::to_device<T>(qkv_h, N, W);
  tk::Matrix<T> out("out", N, Hl), dqkv("dqkv", N, W);
  tk::Vector<A> lse("lse", N * c.nh);
  const auto tile = std::max<std::int64_t>(tk::attention_backward_tile_rows(c.S), 64);  // room for the tables
  tk::Tensor4<T> probs("probs", c.B, c.nh, c.S, c.S), dprobs("dprobs", c.B, c.nh, tile, c.S), kept;
  if (keep) kept = tk::Tensor4<T>("kept", c.B, c.nh, c.S, c.S);
  const T nan = T(std::numeric_limits<float>::quiet_NaN());
  Kokkos::deep_copy(probs, nan);
  Kokkos::deep_copy(dprobs, nan);
  const auto doc = device_documents(c, doc_h);
  const tk::AttentionOptions options{c.nkv, c.documents ? doc.data() : nullptr};
  const Exec exec;
  tk::attention_forward(exec, qkv, out, probs, lse, c.B, c.S, c.nh, c.d, kept, dprobs, options);
  Kokkos::deep_copy(probs, nan);
  Kokkos::deep_copy(dprobs, nan);
  Kokkos::deep_copy(dqkv, T(7));
  const auto dout = Kokkos::subview(dqkv, Kokkos::ALL(), std::make_pair(std::size_t(0), Hl));
  Kokkos::deep_copy(dout, tt::to_device<T>(dout_h, N, Hl));
  Kokkos::View<A**, Kokkos::LayoutRight, kx::MemSpace> dkv_sum;
  if constexpr (kx::is_half_v<T>) dkv_sum = decltype(dkv_sum)("dkv_sum", N, 2 * std::size_t(c.nkv) * c.d);
  tk::attention_backward(exec, dout, qkv, lse, dqkv, probs, dprobs, dkv_sum, kept, options);
  Kokkos::fence();
  const tt::HostVec g = tt::to_host(dqkv);
  const std::size_t kvl = std::size_t(c.nkv) * c.d;
  return {tt::to_host(out), tt::to_host(lse), columns(g, N, W, 0, Hl), columns(g, N, W, Hl, kvl),
          columns(g, N, W, Hl + kvl, kvl)};
}

// The suite traps invalid operations; the causal-skip tests compute with NaN on purpose.
struct InvalidAllowed {
#if defined(__GLIBC__)
  int was = fedisableexcept(FE_INVALID);
  ~InvalidAllowed() {
    feclearexcept(FE_INVALID);
    if (was & FE_INVALID) feenableexcept(FE_INVALID);
  }
#endif
};

enum class Core { flash, batched, causal_tiles, batched_kept };

template <class T>
void check_case(const Case& c, double tolerance, unsigned seed = 7, bool dout_in_dq = false, Core core = Core::flash) {
  std::mt19937 rng(seed);
  const std::size_t N = std::size_t(c.B) * c.S;
  const tt::HostVec qkv = tt::random_vec<T>(rng, N * (c.nh + 2 * c.nkv) * c.d, -2.0, 2.0);
  const tt::HostVec dout = tt::random_vec<T>(rng, N * c.nh * c.d);
  const std::vector<std::int32_t> doc = document_starts(c, rng);
  const Reference ref = naive(c, qkv, dout, doc);
  const Result got = core == Core::flash ? run_flash<T>(c, qkv, dout, doc, dout_in_dq)
                     : run_batched_core<T>(c, qkv, dout, doc,
                                           core == Core::causal_tiles ? tk::AttentionPath::causal_tiles
                                                                      : tk::AttentionPath::batched,
                                           core == Core::batched_kept);
  INFO("core " << int(core));
  INFO("B " << c.B << " S " << c.S << " nh " << c.nh << " nkv " << c.nkv << " d " << c.d << " documents "
            << c.documents);
  CHECK(tt::max_rel_err(got.out, ref.out) < tolerance);
  CHECK(tt::max_rel_err(got.lse, ref.lse) < tolerance);
  CHECK(tt::max_rel_err(got.dq, ref.dq) < tolerance);
  CHECK(tt::max_rel_err(got.dk, ref.dk) < tolerance);
  CHECK(tt::max_rel_err(got.dv, ref.dv) < tolerance);
}

}  // namespace

TEST_CASE("flash attention equals naive attention: causal, GQA, S across the block", "[kernels][flash]") {
  for (const Case& c : {Case{1, 1, 1, 1, 8, false}, Case{2, 5, 2, 2, 8, false}, Case{1, 64, 4, 4, 16, false},
                        Case{2, 100, 4, 2, 16, false}, Case{1, 130, 4, 1, 20, false}, Case{1, 129, 2, 1, 64, false},
                        Case{1, 200, 8, 2, 32, false}, Case{1, 520, 4, 2, 16, false}})
    check_case<float>(c, 2e-5);
  check_case<double>(Case{2, 70, 4, 2, 12, false}, 1e-12);
}

TEST_CASE("flash attention: document masks", "[kernels][flash]") {
  for (const Case& c : {Case{2, 150, 4, 2, 16, true}, Case{1, 300, 2, 1, 8, true}, Case{3, 64, 4, 4, 16, true},
                        Case{2, 700, 2, 2, 8, true}})
    check_case<float>(c, 2e-5);
}

TEST_CASE("flash attention: bf16 and fp16 with fp32 statistics", "[kernels][flash]") {
  check_case<kx::bf16>(Case{2, 90, 4, 2, 16, true}, 1.5 * tt::tol<kx::bf16>());
  check_case<kx::fp16>(Case{1, 130, 4, 1, 16, false}, 2 * tt::tol<kx::fp16>());
  check_case<kx::bf16>(Case{1, 600, 2, 1, 16, true}, 1.5 * tt::tol<kx::bf16>());
}

TEST_CASE("flash attention: dO in the Q block of dqkv, as the model passes it", "[kernels][flash]") {
  check_case<float>(Case{2, 150, 4, 2, 16, true}, 2e-5, 11, true);
}

TEST_CASE("flash attention: teams of several threads and level-1 scratch", "[kernels][flash]") {
  const Exec exec;
  for (const int ts : tt::team_sizes(exec)) {
    tt::TeamSizeGuard guard(ts);
    check_case<float>(Case{2, 100, 4, 2, 16, true}, 2e-5);
  }
  tt::ScratchLimitGuard level1(0);
  check_case<float>(Case{1, 70, 2, 1, 16, false}, 2e-5);
}

TEST_CASE("flash attention: a long row (S = 8192)", "[kernels][flash][long]") {
  check_case<float>(Case{1, 8192, 1, 1, 16, false}, 1e-4);
}

TEST_CASE("flash attention: query rows at an offset, the KV-cache step", "[kernels][flash]") {
  // Rows [p, p + n) of a sequence of Sk positions: equal to those rows of the full attention.
  const int Sk = 150, nh = 4, nkv = 2, d = 16, W = (nh + 2 * nkv) * d;
  std::mt19937 rng(3);
  const Case full{1, Sk, nh, nkv, d, false};
  const tt::HostVec qkv = tt::random_vec<float>(rng, std::size_t(Sk) * W);
  const std::vector<std::int32_t> doc(Sk, 0);
  const Reference ref = naive(full, qkv, tt::HostVec(std::size_t(Sk) * nh * d, 0.0), doc);
  auto qkv_d = tt::to_device<float>(qkv, Sk, W);
  for (const int p : {0, 63, 64, 149}) {
    const int n = Sk - p;
    auto rows = Kokkos::subview(qkv_d, std::make_pair(p, Sk), Kokkos::ALL());
    tk::Matrix<float> out("out", n, nh * d);
    tk::Vector<float> lse("lse", std::size_t(n) * nh);
    const tk::FlashShape s{1, n, Sk, nh, nkv, d, p};
    const auto heads = [&](std::int64_t offset) { return tk::qkv_heads<const float>(qkv_d, offset, Sk, d); };
    tk::flash_attention_forward<Exec, float>(Exec(), s, tk::qkv_heads<const float>(rows, 0, n, d), heads(nh * d),
                                             heads((nh + nkv) * d), tk::qkv_heads<float>(out, 0, n, d), lse.data(),
                                             nullptr);
    Kokkos::fence();
    const tt::HostVec got = tt::to_host(out);
    const tt::HostVec want(ref.out.begin() + std::size_t(p) * nh * d, ref.out.end());
    INFO("p " << p);
    CHECK(tt::max_rel_err(got, want) < 2e-5);
  }
}

TEST_CASE("flash attention: refused shapes", "[kernels][flash]") {
  tk::Matrix<float> qkv("qkv", 8, 3 * 16), out("out", 8, 16);
  tk::Vector<float> lse("lse", 8 * 2);
  Kokkos::View<std::int32_t*, kx::MemSpace> doc;
  CHECK_THROWS(tk::flash_attention_forward(Exec(), qkv, out, lse, 1, 8, 2, 2, 16, doc));    // qkv too narrow
  CHECK_THROWS(tk::flash_attention_forward(Exec(), qkv, out, lse, 1, 8, 3, 2, 8, doc));     // nkv ∤ nh
  tk::Matrix<float> qkv2("qkv", 8, 4 * 8), out2("out", 8, 8);
  CHECK_NOTHROW(tk::flash_attention_forward(Exec(), qkv2, out, lse, 1, 8, 2, 1, 8, doc));
  CHECK_THROWS(tk::flash_attention_forward(Exec(), qkv2, out2, lse, 1, 8, 2, 1, 8, doc));   // out too narrow
}

TEST_CASE("flash attention: a query block never reads keys after its last row (the causal skip)", "[kernels][flash]") {
  // K and V of the positions from p on are NaN, p a query block boundary: the rows before p still
  // equal the reference, which they could not if any of their blocks touched a later key (a
  // masked score's 0 times a NaN value is NaN). The later rows compute with NaN: the suite's
  // trap on invalid operations is off meanwhile.
  const InvalidAllowed allowed;
  const Case c{1, 600, 2, 1, 16, false};
  const int p = int(tk::flash_query_rows) * 2, W = (c.nh + 2 * c.nkv) * c.d;
  REQUIRE(p < c.S);
  std::mt19937 rng(9);
  tt::HostVec qkv = tt::random_vec<float>(rng, std::size_t(c.S) * W);
  const std::vector<std::int32_t> doc(c.S, 0);
  const Reference ref = naive(c, qkv, tt::HostVec(std::size_t(c.S) * c.nh * c.d, 0.0), doc);
  for (int j = p; j < c.S; ++j)
    for (int e = c.nh * c.d; e < W; ++e) qkv[std::size_t(j) * W + e] = std::numeric_limits<double>::quiet_NaN();
  auto qkv_d = tt::to_device<float>(qkv, c.S, W);
  tk::Matrix<float> out("out", c.S, c.nh * c.d);
  tk::Vector<float> lse("lse", std::size_t(c.S) * c.nh);
  tk::flash_attention_forward(Exec(), qkv_d, out, lse, c.B, c.S, c.nh, c.nkv, c.d, Kokkos::View<std::int32_t*, kx::MemSpace>());
  Kokkos::fence();
  const tt::HostVec got = tt::to_host(out);
  const std::size_t before = std::size_t(p) * c.nh * c.d;
  CHECK(std::all_of(got.begin(), got.begin() + before, [](double x) { return std::isfinite(x); }));
  CHECK(tt::max_rel_err(tt::HostVec(got.begin(), got.begin() + before),
                        tt::HostVec(ref.out.begin(), ref.out.begin() + before)) < 2e-5);
}

TEST_CASE("flash attention backward: a key block never reaches query rows before it (the causal skip)",
          "[kernels][flash]") {
  // Q and dO NaN before the key block boundary p: dK and dV of the keys from p on, which only the
  // rows from p on see, still equal the reference; a key block that visited the earlier rows would
  // add its masked 0 · NaN there.
  const InvalidAllowed allowed;
  const Case c{1, 600, 2, 1, 16, false};
  const int p = int(tk::flash_backward_key_rows), W = (c.nh + 2 * c.nkv) * c.d, Hl = c.nh * c.d, kvl = c.nkv * c.d;
  REQUIRE(p < c.S);
  std::mt19937 rng(13);
  tt::HostVec qkv = tt::random_vec<float>(rng, std::size_t(c.S) * W);
  tt::HostVec dout = tt::random_vec<float>(rng, std::size_t(c.S) * Hl);
  const std::vector<std::int32_t> doc(c.S, 0);
  const Reference ref = naive(c, qkv, dout, doc);
  for (int i = 0; i < p; ++i)
    for (int e = 0; e < Hl; ++e)
      qkv[std::size_t(i) * W + e] = dout[std::size_t(i) * Hl + e] = std::numeric_limits<double>::quiet_NaN();
  const Result got = run_flash<float>(c, qkv, dout, doc);
  const std::size_t from = std::size_t(p) * kvl;
  for (const auto& [g, r] : {std::make_pair(&got.dk, &ref.dk), std::make_pair(&got.dv, &ref.dv)}) {
    CHECK(std::all_of(g->begin() + from, g->end(), [](double x) { return std::isfinite(x); }));
    CHECK(tt::max_rel_err(tt::HostVec(g->begin() + from, g->end()), tt::HostVec(r->begin() + from, r->end())) < 2e-5);
  }
}

TEST_CASE("the batched core: grouped-query attention and document masks, both GEMM forms", "[kernels][attention]") {
  // The CUDA default: query heads read their key/value head through the GEMMs' pointer tables (no
  // repeat_kv copy), dK and dV summed over the group member by member; documents masked in the
  // softmax passes. The causal-tile form is its fallback and test reference.
  for (const Core core : {Core::batched, Core::batched_kept, Core::causal_tiles}) {
    for (const Case& c : {Case{2, 5, 2, 2, 8, false}, Case{2, 40, 4, 2, 16, false}, Case{1, 130, 4, 1, 20, true},
                          Case{2, 150, 4, 2, 16, true}, Case{3, 64, 4, 4, 16, true}, Case{1, 1, 2, 1, 8, false}})
      check_case<float>(c, 2e-5, 7, true, core);
    check_case<double>(Case{2, 70, 4, 2, 12, true}, 1e-12, 7, true, core);
    // bf16: the core keeps P, dP and dS in bf16 (flash keeps them in fp32): a few roundings more.
    check_case<kx::bf16>(Case{2, 90, 4, 2, 16, true}, 8 * tt::tol<kx::bf16>(), 7, true, core);
  }
}
