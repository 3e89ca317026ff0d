// Vocab-parallel cross-entropy pieces: one "rank" with the whole vocabulary and splits over 2, 3
// and 4 "ranks" with padding (max / sum-exp / target logit assembled by hand as the all-reduces
// would) against a full-vocabulary log-softmax reference; finite differences in double.
#include <limits>

#include "catch.hpp"
#include "kokkos_kernels/cross_entropy.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "reference.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

namespace {

struct Split {
  int V, parts;
};

struct Assembled {
  tt::HostVec loss;     // [N]
  tt::HostVec dlogits;  // [N, V] (padding dropped)
  tt::HostVec rowmax;   // [N]
};

// Runs the pieces on `parts` shards of the vocabulary, each padded to Vl = ceil(V/parts) columns
// whose padding holds large garbage that must be ignored, and assembles the results.
template <class T>
Assembled vocab_parallel_ce(const tt::HostVec& logits, const std::vector<int>& targets, int N,
                            int V, int parts, double scale) {
  tptrain::kx::ExecSpace exec;
  const int Vl = (V + parts - 1) / parts;
  auto tg = tt::tokens_to_device(targets);
  std::vector<tk::Matrix<T>> shard(parts);
  std::vector<int> valid(parts);
  for (int r = 0; r < parts; ++r) {
    const int v0 = r * Vl;
    valid[r] = std::max(0, std::min(V, v0 + Vl) - v0);
    tt::HostVec h(N * Vl, 50.0);  // padding garbage: would dominate max and sum if not ignored
    for (int t = 0; t < N; ++t)
      for (int j = 0; j < valid[r]; ++j) h[t * Vl + j] = logits[t * V + v0 + j];
    shard[r] = tt::to_device<T>(h, N, Vl);
  }
  // all-reduce MAX of the local row maxima
  tt::HostVec gmax(N, -std::numeric_limits<double>::max());
  for (int r = 0; r < parts; ++r) {
    tk::Vector<T> m("m", N);
    tk::row_max(exec, shard[r], valid[r], m);
    const auto hm = tt::to_host(m);
    for (int t = 0; t < N; ++t) gmax[t] = std::max(gmax[t], hm[t]);
  }
  auto rowmax = tt::to_device<T>(gmax);
  // all-reduce SUM of sum-exp and of the target logit
  tt::HostVec gsum(N, 0.0), gtl(N, 0.0);
  for (int r = 0; r < parts; ++r) {
    tk::Vector<T> s("s", N), tl("tl", N);
    tk::row_sum_exp(exec, shard[r], rowmax, valid[r], s);
    tk::target_logit(exec, shard[r], tg, r * Vl, tl);
    const auto hs = tt::to_host(s), htl = tt::to_host(tl);
    for (int t = 0; t < N; ++t) {
      gsum[t] += hs[t];
      gtl[t] += htl[t];
    }
  }
  auto sumexp = tt::to_device<T>(gsum);
  auto tl = tt::to_device<T>(gtl);
  tk::Vector<T> loss("loss", N);
  tk::cross_entropy_loss(exec, rowmax, sumexp, tl, loss);
  Assembled a{tt::to_host(loss), tt::HostVec(N * V, 0.0), gmax};
  for (int r = 0; r < parts; ++r) {
    tk::Matrix<T> dl("dl", N, Vl);
    tk::cross_entropy_backward(exec, shard[r], rowmax, sumexp, tg, r * Vl, valid[r], T(scale), dl);
    const auto hd = tt::to_host(dl);
    for (int t = 0; t < N; ++t) {
      for (int j = 0; j < valid[r]; ++j) a.dlogits[t * V + r * Vl + j] = hd[t * Vl + j];
      for (int j = valid[r]; j < Vl; ++j) CHECK(hd[t * Vl + j] == 0.0);  // padding
    }
  }
  return a;
}

}  // namespace

TEMPLATE_TEST_CASE("vocab-parallel cross-entropy matches full log-softmax", "[kernels]", float,
                   double) {
  using T = TestType;
  const Split sp = GENERATE(Split{11, 1}, Split{11, 2}, Split{11, 3}, Split{9, 4}, Split{64, 3});
  INFO("V=" << sp.V << " parts=" << sp.parts);
  const int N = 7;
  const double scale = 1.0 / N;
  std::mt19937 rng(71);
  const auto logits = tt::random_vec<T>(rng, N * sp.V, -4.0, 4.0);
  std::vector<int> targets(N);
  std::uniform_int_distribution<int> dist(0, sp.V - 1);
  for (auto& t : targets) t = dist(rng);
  targets[0] = sp.V - 1;  // the last real vocabulary column, next to the padding
  const auto ref = tk::ref::cross_entropy(logits, targets, N, sp.V, scale);
  const auto got = vocab_parallel_ce<T>(logits, targets, N, sp.V, sp.parts, scale);
  CHECK(tt::max_rel_err(got.loss, ref.loss) < tt::tol<T>());
  CHECK(tt::max_rel_err(got.dlogits, ref.dlogits) < tt::tol<T>());
}

TEST_CASE("cross-entropy pieces on a padding-only shard are neutral", "[kernels]") {
  using T = float;
  tptrain::kx::ExecSpace exec;
  const int N = 3, Vl = 4;
  auto logits = tt::to_device<T>(tt::HostVec(N * Vl, 7.0), N, Vl);
  auto targets = tt::tokens_to_device({0, 1, 2});
  tk::Vector<T> m("m", N), s("s", N), tl("tl", N), gm("gm", N);
  tk::row_max(exec, logits, 0, m);
  tk::fill(exec, gm, T(1));
  tk::row_sum_exp(exec, logits, gm, 0, s);
  tk::target_logit(exec, logits, targets, 10, tl);  // targets belong to another rank
  tk::Matrix<T> dl("dl", N, Vl);
  tk::fill(exec, dl, T(5));
  tk::cross_entropy_backward(exec, logits, gm, gm, targets, 10, 0, T(1), dl);
  for (double v : tt::to_host(m)) CHECK(v == static_cast<double>(std::numeric_limits<T>::lowest()));
  for (double v : tt::to_host(s)) CHECK(v == 0.0);
  for (double v : tt::to_host(tl)) CHECK(v == 0.0);
  for (double v : tt::to_host(dl)) CHECK(v == 0.0);
}

TEST_CASE("cross-entropy backward matches finite differences (double)", "[kernels]") {
  using T = double;
  const int N = 4, V = 9;
  const double scale = 0.3;
  std::mt19937 rng(72);
  const auto logits = tt::random_vec<T>(rng, N * V, -3.0, 3.0);
  const std::vector<int> targets{0, 8, 3, 3};
  auto loss = [&](const tt::HostVec& z) {  // scale · Σ_t loss_t, via the pieces on 2 ranks
    const auto a = vocab_parallel_ce<T>(z, targets, N, V, 2, scale);
    double s = 0;
    for (double l : a.loss) s += l;
    return scale * s;
  };
  const auto got = vocab_parallel_ce<T>(logits, targets, N, V, 2, scale);
  CHECK(tt::max_rel_err(got.dlogits, tt::fd_gradient(loss, logits)) < tt::fd_tol);
}

TEST_CASE("cross-entropy row reductions are deterministic", "[kernels]") {
  using T = float;
  tptrain::kx::ExecSpace exec;
  const int N = 5, V = 300;
  std::mt19937 rng(73);
  auto logits = tt::to_device<T>(tt::random_vec<T>(rng, N * V, -5.0, 5.0), N, V);
  tk::Vector<T> m("m", N), s1("s1", N), s2("s2", N);
  tk::row_max(exec, logits, V, m);
  tk::row_sum_exp(exec, logits, m, V, s1);
  tk::row_sum_exp(exec, logits, m, V, s2);
  CHECK(tt::bitwise_equal(tt::to_host(s1), tt::to_host(s2)));
}

// The loss head writes dlogits over the logits (src/model/vocab_parallel_cross_entropy.hpp): in
// place gives bitwise the values of a separate output, padding columns included.
TEMPLATE_TEST_CASE("cross-entropy backward in place equals a separate output", "[kernels]", float,
                   tptrain::kx::bf16) {
  using T = TestType;
  using Acc = tptrain::kx::acc_t<T>;
  tptrain::kx::ExecSpace exec;
  const int N = 5, Vl = 12, valid = 9;
  std::mt19937 rng(73);
  const auto h = tt::random_vec<T>(rng, N * Vl, -4.0, 4.0);
  auto logits = tt::to_device<T>(h, N, Vl);
  auto targets = tt::tokens_to_device({0, 8, 3, 20, 11});  // 20: another rank's; vocab_start 3
  tk::Vector<Acc> m("m", N), s("s", N);
  tk::row_max(exec, logits, valid, m);
  tk::row_sum_exp(exec, logits, m, valid, s);
  tk::Matrix<T> separate("dl", N, Vl);
  tk::cross_entropy_backward(exec, logits, m, s, targets, 3, valid, Acc(0.25), separate);
  tk::cross_entropy_backward(exec, logits, m, s, targets, 3, valid, Acc(0.25), logits);
  const auto a = tt::to_host(separate), b = tt::to_host(logits);
  REQUIRE(a.size() == b.size());
  int differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
  CHECK(differ == 0);
  CHECK(b[0] != h[0]);  // the logits were overwritten
}
