// Flash attention (kokkos_kernels/flash_attention.hpp) against a naive double reference: forward
// (O, lse) and backward (dQ, dK, dV) over causal and document masks, grouped-query attention with
// 1, 2 and 4 query heads per key/value head, S not a multiple of the 64-row block, S = 1, a long
// row (S = 8192), fp32, double, bf16 and fp16, teams of several threads, level-1 scratch, and
// query rows at an offset against a longer key range (the KV-cache step). The batched core
// (attention.hpp: its batched and causal-tile GEMM forms) against the same reference, with
// grouped-query attention and document masks. Value heads of their own width dv != d (multi-head
// latent attention) on every path: flash, its resume and accumulate (ring) modes, the KV-cache
// step, and both GEMM forms.
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "kokkos_kernels/attention.hpp"
#include "kokkos_kernels/flash_attention.hpp"
#include "kokkos_kernels/kv_cache_append.hpp"
#include "kokkos_kernels/launch_count.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;
namespace kx = tptrain::kx;

namespace {

using Exec = kx::ExecSpace;

struct Case {
  int B, S, nh, nkv, d;
  bool documents;
  int dv = 0;  // V's and O's head dim; 0: d
  int value_dim() const { return dv > 0 ? dv : d; }
  int width() const { return (nh + nkv) * d + nkv * value_dim(); }  // qkv's columns
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

// Naive attention in double on host data laid out as the kernels take it: qkv [B·S, (nh + nkv)·d +
// nkv·dv], out and dout [B·S, nh·dv]; dq [B·S, nh·d], dk [B·S, nkv·d], dv [B·S, nkv·dv].
Reference naive(const Case& c, const tt::HostVec& qkv, const tt::HostVec& dout, const std::vector<std::int32_t>& doc) {
  const int B = c.B, S = c.S, nh = c.nh, nkv = c.nkv, d = c.d, dv = c.value_dim(), W = c.width(), group = nh / nkv;
  const double scale = 1.0 / std::sqrt(double(d));
  Reference r;
  r.out.assign(std::size_t(B) * S * nh * dv, 0.0);
  r.lse.assign(std::size_t(B) * nh * S, 0.0);
  r.dq.assign(std::size_t(B) * S * nh * d, 0.0);
  r.dk.assign(std::size_t(B) * S * nkv * d, 0.0);
  r.dv.assign(std::size_t(B) * S * nkv * dv, 0.0);
  auto Q = [&](int b, int h, int i, int e) { return qkv[(std::size_t(b) * S + i) * W + h * d + e]; };
  auto K = [&](int b, int g, int j, int e) { return qkv[(std::size_t(b) * S + j) * W + (nh + g) * d + e]; };
  auto V = [&](int b, int g, int j, int e) { return qkv[(std::size_t(b) * S + j) * W + (nh + nkv) * d + g * dv + e]; };
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
        const std::size_t orow = (std::size_t(b) * S + i) * nh * dv + h * dv;  // O and dO
        const std::size_t qrow = (std::size_t(b) * S + i) * nh * d + h * d;    // dQ
        for (int j = lo; j <= i; ++j) {
          p[j] = std::exp(s[j] - mx) / sum;
          for (int e = 0; e < dv; ++e) r.out[orow + e] += p[j] * V(b, g, j, e);
        }
        double D = 0;
        for (int j = lo; j <= i; ++j) {
          for (int e = 0; e < dv; ++e) dp[j] += dout[orow + e] * V(b, g, j, e);
          D += p[j] * dp[j];
        }
        for (int j = lo; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - D);
          const std::size_t krow = (std::size_t(b) * S + j) * nkv * d + g * d;
          const std::size_t vrow = (std::size_t(b) * S + j) * nkv * dv + g * dv;
          for (int e = 0; e < d; ++e) {
            r.dq[qrow + e] += scale * ds * K(b, g, j, e);
            r.dk[krow + e] += scale * ds * Q(b, h, i, e);
          }
          for (int e = 0; e < dv; ++e) r.dv[vrow + e] += p[j] * dout[orow + e];
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

// dq, dk, dv: the Q, K and V column blocks of a gradient [N, (nh + nkv)·d + nkv·dv].
Result gradient_blocks(const Case& c, const tt::HostVec& dqkv, tt::HostVec out, tt::HostVec lse) {
  const std::size_t N = std::size_t(c.B) * c.S, W = c.width(), Hq = std::size_t(c.nh) * c.d;
  const std::size_t kl = std::size_t(c.nkv) * c.d, vl = std::size_t(c.nkv) * c.value_dim();
  return {std::move(out), std::move(lse), columns(dqkv, N, W, 0, Hq), columns(dqkv, N, W, Hq, kl),
          columns(dqkv, N, W, Hq + kl, vl)};
}

template <class T>
Result run_flash(const Case& c, const tt::HostVec& qkv_h, const tt::HostVec& dout_h,
                 const std::vector<std::int32_t>& doc_h, bool dout_in_dq = false) {
  using A = kx::acc_t<T>;
  const std::size_t N = std::size_t(c.B) * c.S, W = c.width(), Hq = std::size_t(c.nh) * c.d,
                    Ho = std::size_t(c.nh) * c.value_dim();
  auto qkv = tt::to_device<T>(qkv_h, N, W);
  tk::Matrix<T> out("out", N, Ho);
  tk::Vector<A> lse("lse", N * c.nh);
  const auto doc = device_documents(c, doc_h);
  const Exec exec;
  tk::flash_attention_forward(exec, qkv, out, lse, c.B, c.S, c.nh, c.nkv, c.d, doc, c.dv);
  tk::Matrix<T> dqkv("dqkv", N, W);
  Kokkos::View<A**, Kokkos::LayoutRight, kx::MemSpace> dq_sum("dq_sum", N, Hq);
  Kokkos::View<A*, kx::MemSpace> delta("delta", N * c.nh);
  if (dout_in_dq) {  // the model's aliasing: dO in the Q block of dqkv
    auto dq_block = Kokkos::subview(dqkv, Kokkos::ALL(), std::make_pair(std::size_t(0), Ho));
    Kokkos::deep_copy(dq_block, tt::to_device<T>(dout_h, N, Ho));
    tk::flash_attention_backward(exec, dq_block, qkv, out, lse, dqkv, doc, dq_sum, delta, c.B, c.S, c.nh, c.nkv, c.d,
                                 c.dv);
  } else {
    auto dout = tt::to_device<T>(dout_h, N, Ho);
    tk::flash_attention_backward(exec, dout, qkv, out, lse, dqkv, doc, dq_sum, delta, c.B, c.S, c.nh, c.nkv, c.d,
                                 c.dv);
  }
  Kokkos::fence();
  return gradient_blocks(c, tt::to_host(dqkv), tt::to_host(out), tt::to_host(lse));
}

// The batched core on one of its GEMM forms (batched or causal tiles), dO in dqkv's Q block as
// the model places it (where it fits: dv <= d; else a buffer of its own), optionally keeping the
// scores (recompute = none); the workspaces start as NaN (nothing may be read before it is
// written).
template <class T>
Result run_batched_core(const Case& c, const tt::HostVec& qkv_h, const tt::HostVec& dout_h,
                        const std::vector<std::int32_t>& doc_h, tk::AttentionPath path, bool keep,
                        tk::LaunchCounts* backward_launches = nullptr) {
  using A = kx::acc_t<T>;
  const tk::AttentionPathScope scope(path);
  const std::size_t N = std::size_t(c.B) * c.S, W = c.width(), Ho = std::size_t(c.nh) * c.value_dim();
  auto qkv = tt::to_device<T>(qkv_h, N, W);
  tk::Matrix<T> out("out", N, Ho), dqkv("dqkv", N, W);
  tk::Vector<A> lse("lse", N * c.nh);
  const auto tile = std::max<std::int64_t>(tk::attention_backward_tile_rows(c.S), 64);  // room for the tables
  tk::Tensor4<T> probs("probs", c.B, c.nh, c.S, c.S), dprobs("dprobs", c.B, c.nh, tile, c.S), kept;
  if (keep) kept = tk::Tensor4<T>("kept", c.B, c.nh, c.S, c.S);
  const T nan = T(std::numeric_limits<float>::quiet_NaN());
  Kokkos::deep_copy(probs, nan);
  Kokkos::deep_copy(dprobs, nan);
  const auto doc = device_documents(c, doc_h);
  const tk::AttentionOptions options{c.nkv, c.documents ? doc.data() : nullptr, c.dv};
  const Exec exec;
  tk::attention_forward(exec, qkv, out, probs, lse, c.B, c.S, c.nh, c.d, kept, dprobs, options);
  Kokkos::deep_copy(probs, nan);
  Kokkos::deep_copy(dprobs, nan);
  Kokkos::deep_copy(dqkv, T(7));
  using Strided = Kokkos::View<T**, Kokkos::LayoutStride, kx::MemSpace>;
  const Strided dout = c.value_dim() <= c.d
                           ? Strided(Kokkos::subview(dqkv, Kokkos::ALL(), std::make_pair(std::size_t(0), Ho)))
                           : Strided(tk::Matrix<T>("dout", N, Ho));
  Kokkos::deep_copy(dout, tt::to_device<T>(dout_h, N, Ho));
  Kokkos::View<A**, Kokkos::LayoutRight, kx::MemSpace> dkv_sum;
  if constexpr (kx::is_half_v<T>)
    dkv_sum = decltype(dkv_sum)("dkv_sum", N, std::size_t(c.nkv) * (c.d + c.value_dim()));
  if (backward_launches) {
    Kokkos::fence();
    tk::LaunchCounting counting;
    tk::attention_backward(exec, dout, qkv, lse, dqkv, probs, dprobs, dkv_sum, kept, options);
    exec.fence();
    *backward_launches = tk::launch_count::total();
  } else {
    tk::attention_backward(exec, dout, qkv, lse, dqkv, probs, dprobs, dkv_sum, kept, options);
  }
  Kokkos::fence();
  return gradient_blocks(c, tt::to_host(dqkv), tt::to_host(out), tt::to_host(lse));
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
  const tt::HostVec qkv = tt::random_vec<T>(rng, N * c.width(), -2.0, 2.0);
  const tt::HostVec dout = tt::random_vec<T>(rng, N * c.nh * c.value_dim());
  const std::vector<std::int32_t> doc = document_starts(c, rng);
  const Reference ref = naive(c, qkv, dout, doc);
  const Result got = core == Core::flash ? run_flash<T>(c, qkv, dout, doc, dout_in_dq)
                     : run_batched_core<T>(c, qkv, dout, doc,
                                           core == Core::causal_tiles ? tk::AttentionPath::causal_tiles
                                                                      : tk::AttentionPath::batched,
                                           core == Core::batched_kept);
  INFO("core " << int(core));
  INFO("B " << c.B << " S " << c.S << " nh " << c.nh << " nkv " << c.nkv << " d " << c.d << " dv " << c.value_dim()
            << " documents " << c.documents);
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

// ---- value heads of their own width (dv != d: multi-head latent attention) ---------------------
// Widths whose 16-padded tiles differ (d' != dv') as well as the d = 12, dv = 8 pair whose tiles
// agree, dv below and above d: a kernel that used d's tile or width for V, O, dO or dV reads or
// writes the wrong columns, which the element-by-element comparison against the reference (whose
// O and dV have dv columns) catches ("flash attention: a V width of d instead of dv fails the
// comparison" shows it does).

namespace {

// Flash forward and backward through FlashShape and FlashHeads, V, O, dO and dV addressed with
// their true head dim c.value_dim() but computed over `v_width` columns (= c.value_dim() unless a
// test imitates a kernel that took d for V). The buffers carry one spare row, so that a wrong
// width reads and writes inside them.
template <class T>
Result run_flash_heads(const Case& c, const tt::HostVec& qkv_h, const tt::HostVec& dout_h,
                       const std::vector<std::int32_t>& doc_h, const int v_width) {
  using A = kx::acc_t<T>;
  const std::size_t N = std::size_t(c.B) * c.S, W = c.width(), dv = c.value_dim();
  const std::size_t Hq = std::size_t(c.nh) * c.d, Ho = std::size_t(c.nh) * dv;
  tt::HostVec qkv_pad(qkv_h), dout_pad(dout_h);
  qkv_pad.resize((N + 1) * W, 0.0);
  dout_pad.resize((N + 1) * Ho, 0.0);
  auto qkv = tt::to_device<T>(qkv_pad, N + 1, W);
  auto dout = tt::to_device<T>(dout_pad, N + 1, Ho);
  tk::Matrix<T> out("out", N + 1, Ho), dqkv("dqkv", N + 1, W);
  tk::Vector<A> lse("lse", N * c.nh), delta("delta", N * c.nh);
  tk::Matrix<A> dq_sum("dq_sum", N + 1, Hq);
  const auto doc = device_documents(c, doc_h);
  const std::int32_t* docs = c.documents ? doc.data() : nullptr;
  tk::FlashShape s{c.B, c.S, c.S, c.nh, c.nkv, c.d, 0};
  s.dv = v_width;
  const std::int64_t S = c.S, q = 0, k = std::int64_t(Hq), v = std::int64_t(Hq) + c.nkv * c.d;
  const auto in = [&](const tk::Matrix<T>& m, std::int64_t at, std::int64_t width) {
    return tk::qkv_heads<const T>(m, at, S, width);
  };
  const auto of = [&](const auto& m, std::int64_t at, std::int64_t width) {
    return tk::qkv_heads<typename std::remove_reference_t<decltype(m)>::value_type>(m, at, S, width);
  };
  const Exec exec;
  tk::flash_attention_forward<Exec, T>(exec, s, in(qkv, q, c.d), in(qkv, k, c.d), in(qkv, v, dv), of(out, 0, dv),
                                       lse.data(), docs);
  tk::flash_attention_backward<Exec, T>(exec, s, in(qkv, q, c.d), in(qkv, k, c.d), in(qkv, v, dv), in(out, 0, dv),
                                        in(dout, 0, dv), lse.data(), docs, of(dqkv, q, c.d), of(dqkv, k, c.d),
                                        of(dqkv, v, dv), of(dq_sum, 0, c.d), delta.data());
  Kokkos::fence();
  tt::HostVec o = tt::to_host(out), g = tt::to_host(dqkv);
  o.resize(N * Ho);
  g.resize(N * W);
  return gradient_blocks(c, g, std::move(o), tt::to_host(lse));
}

// The ring attention modes over two key chunks [0, split) and [split, S) of every sequence: the
// forward resumes (o in acc_t from 0, lse from -inf), the backward accumulates dQ, dK and dV
// (acc_t) from flash_attention_delta's D; src/model/ring_attention.hpp's calls, one rank.
template <class T>
void check_ring_chunks(const Case& c, const int split, const double tolerance) {
  using A = kx::acc_t<T>;
  std::mt19937 rng(5);
  const std::size_t N = std::size_t(c.B) * c.S, W = c.width();
  const std::int64_t d = c.d, dv = c.value_dim(), S = c.S, nh = c.nh, nkv = c.nkv;
  const tt::HostVec qkv_h = tt::random_vec<T>(rng, N * W, -2.0, 2.0);
  const tt::HostVec dout_h = tt::random_vec<T>(rng, N * nh * dv);
  const std::vector<std::int32_t> doc_h = document_starts(c, rng);
  const Reference ref = naive(c, qkv_h, dout_h, doc_h);
  auto qkv = tt::to_device<T>(qkv_h, N, W);
  auto dout = tt::to_device<T>(dout_h, N, nh * dv);
  tk::Matrix<A> o("o", N, nh * dv), dq_sum("dq_sum", N, nh * d), dk_sum("dk_sum", N, nkv * d),
      dv_sum("dv_sum", N, nkv * dv);
  tk::Vector<A> lse("lse", N * nh), delta("delta", N * nh);
  Kokkos::deep_copy(lse, -std::numeric_limits<A>::infinity());
  const auto doc = device_documents(c, doc_h);
  const std::int32_t* docs = c.documents ? doc.data() : nullptr;
  const Exec exec;
  // Keys of the chunk [k0, k0 + n) of each sequence, rows of qkv's key (or value) block.
  const auto keys = [&](std::int64_t k0, std::int64_t first_column, std::int64_t width) {
    return tk::FlashHeads<const T>{qkv.data() + k0 * std::int64_t(W) + first_column, std::int64_t(W),
                                   S * std::int64_t(W), width};
  };
  const auto sums = [&](const tk::Matrix<A>& m, std::int64_t k0, std::int64_t width) {
    const std::int64_t ld = m.stride(0);
    return tk::FlashHeads<A>{m.data() + k0 * ld, ld, S * ld, width};
  };
  const std::int64_t chunks[2][2] = {{0, split}, {split, S - split}};
  const auto shape = [&](const std::int64_t* chunk) {
    tk::FlashShape s{c.B, S, chunk[1], nh, nkv, d, 0};
    s.k0 = chunk[0];
    s.dv = dv;
    return s;
  };
  for (const auto& chunk : chunks)
    tk::flash_attention_forward<Exec, T, A>(exec, shape(chunk), tk::qkv_heads<const T>(qkv, 0, S, d),
                                            keys(chunk[0], nh * d, d), keys(chunk[0], (nh + nkv) * d, dv),
                                            tk::qkv_heads<A>(o, 0, S, dv), lse.data(), docs, /*resume=*/true);
  Kokkos::fence();
  const tt::HostVec o_h = tt::to_host(o);
  const auto ctx = tt::to_device<T>(o_h, N, nh * dv);  // the context the ring converts o into
  tk::FlashShape whole{c.B, S, S, nh, nkv, d, 0};
  whole.dv = dv;
  tk::flash_attention_delta<Exec, T>(exec, whole, tk::qkv_heads<const T>(ctx, 0, S, dv),
                                     tk::qkv_heads<const T>(dout, 0, S, dv), delta.data());
  for (const auto& chunk : chunks)
    tk::flash_attention_backward<Exec, T, A>(
        exec, shape(chunk), tk::qkv_heads<const T>(qkv, 0, S, d), keys(chunk[0], nh * d, d),
        keys(chunk[0], (nh + nkv) * d, dv), tk::qkv_heads<const T>(qkv, 0, S, d),
        tk::qkv_heads<const T>(dout, 0, S, dv), lse.data(), docs, tk::FlashHeads<T>{}, sums(dk_sum, chunk[0], d),
        sums(dv_sum, chunk[0], dv), tk::qkv_heads<A>(dq_sum, 0, S, d), delta.data(), /*accumulate=*/true);
  Kokkos::fence();
  INFO("B " << c.B << " S " << S << " nh " << nh << " nkv " << nkv << " d " << d << " dv " << dv << " split " << split);
  CHECK(tt::max_rel_err(o_h, ref.out) < tolerance);
  CHECK(tt::max_rel_err(tt::to_host(lse), ref.lse) < tolerance);
  CHECK(tt::max_rel_err(tt::to_host(dq_sum), ref.dq) < tolerance);
  CHECK(tt::max_rel_err(tt::to_host(dk_sum), ref.dk) < tolerance);
  CHECK(tt::max_rel_err(tt::to_host(dv_sum), ref.dv) < tolerance);
}

}  // namespace

TEST_CASE("flash attention: V heads of their own width (dv != d)", "[kernels][flash][dv]") {
  // Causal and with documents, grouped (nkv < nh) and not, several query and key blocks (S = 300).
  for (const Case& c : {Case{2, 70, 4, 2, 12, false, 8}, Case{2, 70, 4, 4, 8, true, 12}, Case{1, 90, 4, 1, 20, true, 12},
                        Case{1, 60, 2, 2, 8, false, 40}, Case{1, 300, 2, 1, 40, true, 8}})
    check_case<float>(c, 2e-5);
  check_case<double>(Case{1, 50, 4, 2, 20, true, 12}, 1e-12);
  check_case<kx::bf16>(Case{2, 60, 4, 2, 12, true, 8}, 1.5 * tt::tol<kx::bf16>());
  check_case<kx::bf16>(Case{1, 80, 2, 1, 8, true, 24}, 1.5 * tt::tol<kx::bf16>());
  // The FlashShape entry point (what ring attention and the cache step call) with the same shapes.
  std::mt19937 rng(21);
  for (const Case& c : {Case{1, 40, 4, 2, 20, true, 12}, Case{1, 40, 2, 1, 8, false, 24}}) {
    const std::size_t N = std::size_t(c.B) * c.S;
    const tt::HostVec qkv = tt::random_vec<float>(rng, N * c.width(), -2.0, 2.0);
    const tt::HostVec dout = tt::random_vec<float>(rng, N * c.nh * c.value_dim());
    const std::vector<std::int32_t> doc = document_starts(c, rng);
    const Reference ref = naive(c, qkv, dout, doc);
    const Result got = run_flash_heads<float>(c, qkv, dout, doc, c.value_dim());
    INFO("d " << c.d << " dv " << c.value_dim());
    CHECK(tt::max_rel_err(got.out, ref.out) < 2e-5);
    CHECK(tt::max_rel_err(got.dq, ref.dq) < 2e-5);
    CHECK(tt::max_rel_err(got.dk, ref.dk) < 2e-5);
    CHECK(tt::max_rel_err(got.dv, ref.dv) < 2e-5);
  }
}

TEST_CASE("flash attention: dv != d on teams of several threads and level-1 scratch", "[kernels][flash][dv]") {
  const Exec exec;
  for (const int ts : tt::team_sizes(exec)) {
    tt::TeamSizeGuard guard(ts);
    check_case<float>(Case{1, 70, 4, 2, 20, true, 12}, 2e-5);
    check_case<float>(Case{1, 70, 2, 1, 8, true, 24}, 2e-5);
  }
  tt::ScratchLimitGuard level1(0);
  check_case<float>(Case{1, 70, 2, 1, 20, false, 12}, 2e-5);
}

TEST_CASE("flash attention: a V width of d instead of dv fails the comparison", "[kernels][flash][dv]") {
  // The kernel run as if it took d for V's head dim, on the layout with dv: the test's comparison
  // must see it (else the dv != d tests could pass a kernel that ignores dv). O shows it (dv > d:
  // columns missing; dv < d: heads overlapping), and dQ through dP = dO Vᵀ over the wrong columns;
  // dV only with dv > d (with dv < d a head's first dv columns are still Pᵀ dO of its own).
  std::mt19937 rng(17);
  for (const Case& c : {Case{1, 40, 2, 2, 12, false, 8}, Case{1, 40, 2, 1, 8, false, 12}}) {
    const std::size_t N = std::size_t(c.B) * c.S;
    const tt::HostVec qkv = tt::random_vec<float>(rng, N * c.width(), -2.0, 2.0);
    const tt::HostVec dout = tt::random_vec<float>(rng, N * c.nh * c.value_dim());
    const std::vector<std::int32_t> doc(N, 0);
    const Reference ref = naive(c, qkv, dout, doc);
    const Result right = run_flash_heads<float>(c, qkv, dout, doc, c.value_dim());
    const Result wrong = run_flash_heads<float>(c, qkv, dout, doc, c.d);
    INFO("d " << c.d << " dv " << c.value_dim());
    CHECK(tt::max_rel_err(right.out, ref.out) < 2e-5);
    CHECK(tt::max_rel_err(right.dv, ref.dv) < 2e-5);
    CHECK(tt::max_rel_err(wrong.out, ref.out) > 1e-2);
    CHECK(tt::max_rel_err(wrong.dq, ref.dq) > 1e-2);  // dP = dO Vᵀ over the wrong columns
    if (c.value_dim() > c.d) CHECK(tt::max_rel_err(wrong.dv, ref.dv) > 1e-2);
  }
}

TEST_CASE("flash attention: ring attention's resume and accumulate modes with dv != d", "[kernels][flash][dv]") {
  // The split at 40: inside a key block, so that one block of keys straddles the two chunks.
  check_ring_chunks<float>(Case{2, 96, 4, 2, 12, true, 8}, 40, 2e-5);
  check_ring_chunks<float>(Case{1, 96, 2, 1, 8, true, 20}, 40, 2e-5);
  check_ring_chunks<float>(Case{1, 96, 2, 2, 20, false, 12}, 64, 2e-5);
  check_ring_chunks<kx::bf16>(Case{1, 80, 4, 2, 12, true, 8}, 30, 1.5 * tt::tol<kx::bf16>());
}

TEST_CASE("flash attention: the KV-cache step with dv != d", "[kernels][flash][dv]") {
  // A prefill of p rows, then the remaining rows, against caches k [nkv, P, d] and v [nkv, P, dv]
  // that kv_cache_append filled: equal to those rows of the full attention.
  using Cache = Kokkos::View<float***, Kokkos::LayoutRight, kx::MemSpace>;
  for (const Case& full : {Case{1, 100, 4, 2, 12, false, 8}, Case{1, 100, 2, 1, 8, false, 24}}) {
    const int Sk = full.S, W = full.width(), Ho = full.nh * full.value_dim();
    std::mt19937 rng(3);
    const tt::HostVec qkv = tt::random_vec<float>(rng, std::size_t(Sk) * W);
    const Reference ref = naive(full, qkv, tt::HostVec(std::size_t(Sk) * Ho, 0.0), std::vector<std::int32_t>(Sk, 0));
    auto qkv_d = tt::to_device<float>(qkv, Sk, W);
    Cache k("k", full.nkv, Sk + 7, full.d), v("v", full.nkv, Sk + 7, full.value_dim());
    const int p = 70;
    for (const auto& [p0, p1] : {std::make_pair(0, p), std::make_pair(p, Sk)}) {
      const int n = p1 - p0;
      auto rows = Kokkos::subview(qkv_d, std::make_pair(p0, p1), Kokkos::ALL());
      tk::Matrix<float> out("out", n, Ho);
      tk::Vector<float> lse("lse", std::size_t(n) * full.nh);
      tk::kv_cache_append(Exec(), rows, k, v, p0);
      tk::flash_attention_cached_forward(Exec(), rows, k, v, p0, out, lse, Kokkos::View<std::int32_t*, kx::MemSpace>());
      Kokkos::fence();
      const tt::HostVec want(ref.out.begin() + std::size_t(p0) * Ho, ref.out.begin() + std::size_t(p1) * Ho);
      INFO("d " << full.d << " dv " << full.value_dim() << " rows " << p0 << ".." << p1);
      CHECK(tt::max_rel_err(tt::to_host(out), want) < 2e-5);
    }
  }
}

TEST_CASE("the batched core: dv != d, both GEMM forms", "[kernels][attention][dv]") {
  // dv < d: the batched form reads dO from dqkv's Q block and splits its paired GEMMs; dv > d:
  // dO does not fit there, and the backward runs the causal tiles whatever the path.
  for (const Core core : {Core::batched, Core::batched_kept, Core::causal_tiles}) {
    for (const Case& c : {Case{2, 40, 4, 2, 12, true, 8}, Case{1, 70, 4, 1, 20, true, 12}, Case{2, 30, 2, 2, 8, false, 24},
                          Case{1, 1, 2, 1, 12, false, 8}})
      check_case<float>(c, 2e-5, 7, true, core);
    check_case<double>(Case{1, 50, 4, 2, 20, true, 12}, 1e-12, 7, true, core);
    check_case<kx::bf16>(Case{2, 40, 4, 2, 20, true, 12}, 8 * tt::tol<kx::bf16>(), 7, true, core);  // dkv_sum
    check_case<kx::bf16>(Case{1, 40, 2, 1, 8, true, 24}, 8 * tt::tol<kx::bf16>(), 7, true, core);
  }
  // The batched backward's launches with dv < d: per chunk [S | dP] and each member's [dV | dK]
  // are two calls each (one with the scores kept: dP alone), dQ one.
  const Case c{1, 40, 4, 2, 12, false, 8};
  const std::int64_t g = c.nh / c.nkv;
  std::mt19937 rng(7);
  const std::size_t N = std::size_t(c.B) * c.S;
  const tt::HostVec qkv = tt::random_vec<float>(rng, N * c.width(), -2.0, 2.0);
  const tt::HostVec dout = tt::random_vec<float>(rng, N * c.nh * c.value_dim());
  const std::vector<std::int32_t> doc(N, 0);
  for (const bool keep : {false, true}) {
    tk::LaunchCounts launches;
    run_batched_core<float>(c, qkv, dout, doc, tk::AttentionPath::batched, keep, &launches);
    INFO("scores kept " << keep);
    CHECK(launches.blas == (keep ? 1 + 2 * g + 1 : 2 * (2 + 2 * g + 1)));
    CHECK(launches.kernels == (keep ? 2 : 3));
  }
}

TEST_CASE("flash attention: dv's scratch and refused shapes", "[kernels][flash][dv]") {
  // dv = 0 and dv = d are today's sizes; DeepSeek-V3's heads (d = 192, dv = 128):
  //   forward  Q 256·192 + Kᵀ 64·192 + V 64·128 + O 256·128 + S 256·64 + max, sum 2·256
  //   backward K, dK 2·256·192 + dV 256·128 + Kᵀ 192·256 + Vᵀ 128·256 + Q, dQ 2·64·192 + dO 64·128
  //            + P, dS 2·64·256 + lse, D 2·64
  CHECK(tk::flash_forward_scratch_elements(64, 64) == tk::flash_forward_scratch_elements(64));
  CHECK(tk::flash_backward_scratch_elements(64, 64) == tk::flash_backward_scratch_elements(64));
  CHECK(tk::flash_forward_scratch_elements(192, 128) == 119296);
  CHECK(tk::flash_backward_scratch_elements(192, 128) == 278656);

  // qkv [8, (2 + 1)·16 + 1·8], out [8, 2·8].
  tk::Matrix<float> qkv("qkv", 8, 3 * 16 + 8), out("out", 8, 2 * 8), wide("wide", 8, 2 * 16);
  tk::Vector<float> lse("lse", 8 * 2), delta("delta", 8 * 2);
  tk::Matrix<float> dqkv("dqkv", 8, 3 * 16 + 8), dq_sum("dq_sum", 8, 2 * 16), dout("dout", 8, 2 * 8);
  Kokkos::View<std::int32_t*, kx::MemSpace> doc;
  CHECK_NOTHROW(tk::flash_attention_forward(Exec(), qkv, out, lse, 1, 8, 2, 1, 16, doc, 8));
  CHECK_THROWS(tk::flash_attention_forward(Exec(), qkv, wide, lse, 1, 8, 2, 1, 16, doc, 8));  // out of d
  CHECK_THROWS(tk::flash_attention_forward(Exec(), qkv, out, lse, 1, 8, 2, 1, 16, doc));      // dv = d
  CHECK_NOTHROW(tk::flash_attention_backward(Exec(), dout, qkv, out, lse, dqkv, doc, dq_sum, delta, 1, 8, 2, 1, 16, 8));
  // dO in dqkv's Q block: with dv != d a head's dQ would overwrite another head's dO.
  const auto in_q_block = Kokkos::subview(dqkv, Kokkos::ALL(), std::make_pair(0, 2 * 8));
  CHECK_THROWS(
      tk::flash_attention_backward(Exec(), in_q_block, qkv, out, lse, dqkv, doc, dq_sum, delta, 1, 8, 2, 1, 16, 8));
  {  // The causal tiles take dO in the Q block up to dv = d; beyond, it would reach the K block.
    const tk::AttentionPathScope tiles(tk::AttentionPath::causal_tiles);
    tk::Matrix<float> qkv2("qkv", 8, 3 * 8 + 16), dqkv2("dqkv", 8, 3 * 8 + 16), dout2("dout", 8, 2 * 16);
    tk::Tensor4<float> probs2("probs", 1, 2, 8, 8), dprobs2("dprobs", 1, 2, 8, 8);
    const tk::AttentionOptions wide_v{1, nullptr, 16};
    const auto reaching = Kokkos::subview(dqkv2, Kokkos::ALL(), std::make_pair(0, 2 * 16));
    CHECK_NOTHROW(tk::attention_backward(Exec(), dout2, qkv2, lse, dqkv2, probs2, dprobs2, tk::Matrix<float>(),
                                         tk::Tensor4<float>(), wide_v));
    CHECK_THROWS(tk::attention_backward(Exec(), reaching, qkv2, lse, dqkv2, probs2, dprobs2, tk::Matrix<float>(),
                                        tk::Tensor4<float>(), wide_v));
  }
  // The batched core: options.dv must agree with out and dout.
  tk::Tensor4<float> probs("probs", 1, 2, 8, 8), dprobs("dprobs", 1, 2, 8, 8);
  const tk::AttentionOptions options{1, nullptr, 8}, wrong{1, nullptr, 4};
  CHECK_NOTHROW(tk::attention_forward(Exec(), qkv, out, probs, lse, 1, 8, 2, 16, tk::Tensor4<float>(), dprobs, options));
  CHECK_THROWS(tk::attention_forward(Exec(), qkv, out, probs, lse, 1, 8, 2, 16, tk::Tensor4<float>(), dprobs, wrong));
  CHECK_THROWS(tk::attention_backward(Exec(), dout, qkv, lse, dqkv, probs, dprobs, tk::Matrix<float>(),
                                      tk::Tensor4<float>(), wrong));
  // The cache step: v_cache of another position count, and qkv too wide for the caches.
  using Cache = Kokkos::View<float***, Kokkos::LayoutRight, kx::MemSpace>;
  Cache k("k", 1, 8, 16), v("v", 1, 8, 8), v_short("v", 1, 7, 8);
  CHECK_NOTHROW(tk::kv_cache_append(Exec(), qkv, k, v, 0));
  CHECK_THROWS(tk::kv_cache_append(Exec(), qkv, k, v_short, 0));
  CHECK_THROWS(tk::flash_attention_cached_forward(Exec(), qkv, k, v_short, 0, out, lse, doc));
  CHECK_THROWS(tk::flash_attention_cached_forward(Exec(), wide, k, v, 0, out, lse, doc));
}
