// Causal attention core against a naive reference (forward and backward), finite differences in
// double, masking, and bitwise determinism of the backward.
#include "catch.hpp"
#include "kokkos_kernels/attention.hpp"
#include "reference.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

namespace {

struct AttnShape {
  int B, S, nh, d;
};

}  // namespace

TEMPLATE_TEST_CASE("attention forward/backward match naive reference", "[kernels]", float, double) {
  using T = TestType;
  const AttnShape s = GENERATE(AttnShape{2, 5, 3, 4}, AttnShape{1, 1, 1, 1}, AttnShape{3, 7, 2, 5},
                               AttnShape{2, 16, 2, 8});
  INFO("B=" << s.B << " S=" << s.S << " nh=" << s.nh << " d=" << s.d);
  const int Hl = s.nh * s.d, rows = s.B * s.S;
  std::mt19937 rng(51);
  Kokkos::DefaultExecutionSpace exec;
  const auto hqkv = tt::random_vec<T>(rng, rows * 3 * Hl, -1.5, 1.5);
  const auto hdout = tt::random_vec<T>(rng, rows * Hl);
  auto qkv = tt::to_device<T>(hqkv, rows, 3 * Hl);
  auto dout = tt::to_device<T>(hdout, rows, Hl);
  tk::Matrix<T> out("out", rows, Hl);
  tk::Tensor4<T> att("att", s.B, s.nh, s.S, s.S);
  // dqkv starts non-zero: it must be overwritten.
  auto dqkv = tt::to_device<T>(tt::random_vec<T>(rng, rows * 3 * Hl), rows, 3 * Hl);

  tk::attention_forward(exec, qkv, out, att, s.B, s.S, s.nh, s.d);
  tk::attention_backward(exec, dout, qkv, att, dqkv);
  exec.fence();

  const auto rf = tk::ref::attention_forward(hqkv, s.B, s.S, s.nh, s.d);
  const auto ratt = tt::to_host(att);
  CHECK(tt::max_rel_err(tt::to_host(out), rf.out) < tt::tol<T>());
  CHECK(tt::max_rel_err(ratt, rf.att) < tt::tol<T>());
  // Masked entries are exactly 0 and every row sums to 1.
  for (int bh = 0; bh < s.B * s.nh; ++bh)
    for (int i = 0; i < s.S; ++i) {
      double sum = 0;
      for (int j = 0; j < s.S; ++j) {
        const double p = ratt[(bh * s.S + i) * s.S + j];
        if (j > i) CHECK(p == 0.0);
        sum += p;
      }
      CHECK(std::fabs(sum - 1.0) < 10 * tt::tol<T>());
    }
  const auto rb = tk::ref::attention_backward(hdout, hqkv, rf.att, s.B, s.S, s.nh, s.d);
  CHECK(tt::max_rel_err(tt::to_host(dqkv), rb) < 2 * tt::tol<T>());

  // Determinism: a second backward (with a caller-provided workspace) is bitwise identical.
  tk::Matrix<T> dqkv2("dqkv2", rows, 3 * Hl);
  tk::Tensor4<T> ws("ws", s.B, s.nh, s.S, s.S);
  tk::attention_backward(exec, dout, qkv, att, dqkv2, ws);
  exec.fence();
  CHECK(tt::bitwise_equal(tt::to_host(dqkv), tt::to_host(dqkv2)));
}

TEST_CASE("attention backward matches finite differences (double)", "[kernels]") {
  using T = double;
  const int B = 2, S = 5, nh = 3, d = 4, Hl = nh * d, rows = B * S;
  std::mt19937 rng(52);
  Kokkos::DefaultExecutionSpace exec;
  const auto hqkv = tt::random_vec<T>(rng, rows * 3 * Hl, -1.5, 1.5);
  const auto hw = tt::random_vec<T>(rng, rows * Hl);  // L = Σ w ⊙ out
  auto loss = [&](const tt::HostVec& v) {
    auto qkv = tt::to_device<T>(v, rows, 3 * Hl);
    tk::Matrix<T> out("out", rows, Hl);
    tk::Tensor4<T> att("att", B, nh, S, S);
    tk::attention_forward(exec, qkv, out, att, B, S, nh, d);
    return tt::dot(hw, tt::to_host(out));
  };
  auto qkv = tt::to_device<T>(hqkv, rows, 3 * Hl);
  auto w = tt::to_device<T>(hw, rows, Hl);
  tk::Matrix<T> out("out", rows, Hl), dqkv("dqkv", rows, 3 * Hl);
  tk::Tensor4<T> att("att", B, nh, S, S);
  tk::attention_forward(exec, qkv, out, att, B, S, nh, d);
  tk::attention_backward(exec, w, qkv, att, dqkv);
  CHECK(tt::max_rel_err(tt::to_host(dqkv), tt::fd_gradient(loss, hqkv)) < tt::fd_tol);
}

TEST_CASE("attention is causal: later tokens do not change earlier outputs", "[kernels]") {
  using T = double;
  const int B = 1, S = 6, nh = 2, d = 3, Hl = nh * d;
  std::mt19937 rng(53);
  Kokkos::DefaultExecutionSpace exec;
  auto hqkv = tt::random_vec<T>(rng, S * 3 * Hl);
  tk::Matrix<T> out1("out1", S, Hl), out2("out2", S, Hl);
  tk::Tensor4<T> att("att", B, nh, S, S);
  tk::attention_forward(exec, tt::to_device<T>(hqkv, S, 3 * Hl), out1, att, B, S, nh, d);
  for (int c = 0; c < 3 * Hl; ++c) hqkv[(S - 1) * 3 * Hl + c] += 0.5;  // change the last token
  tk::attention_forward(exec, tt::to_device<T>(hqkv, S, 3 * Hl), out2, att, B, S, nh, d);
  const auto h1 = tt::to_host(out1), h2 = tt::to_host(out2);
  CHECK(tt::bitwise_equal(tt::HostVec(h1.begin(), h1.end() - Hl),
                          tt::HostVec(h2.begin(), h2.end() - Hl)));
}
