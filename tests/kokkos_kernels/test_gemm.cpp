// Linear-layer GEMMs against naive host loops; accumulate/overwrite semantics; unmanaged views
// and subviews.
#include <type_traits>

#include "catch.hpp"
#include "kokkos_kernels/gemm.hpp"
#include "kokkos_kernels/launch_count.hpp"
#include "reference.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

namespace {

struct Shape {
  int N, in, out;
};

template <class T>
void check_linear(const Shape& s, unsigned seed) {
  std::mt19937 rng(seed);
  tptrain::kx::ExecSpace exec;
  const auto hx = tt::random_vec<T>(rng, s.N * s.in);
  const auto hW = tt::random_vec<T>(rng, s.out * s.in);
  const auto hdy = tt::random_vec<T>(rng, s.N * s.out);
  const auto hdW0 = tt::random_vec<T>(rng, s.out * s.in);
  auto x = tt::to_device<T>(hx, s.N, s.in);
  auto W = tt::to_device<T>(hW, s.out, s.in);
  auto dy = tt::to_device<T>(hdy, s.N, s.out);
  auto dW = tt::to_device<T>(hdW0, s.out, s.in);
  // Outputs start non-zero: the overwrite kernels must ignore their old contents.
  auto y = tt::to_device<T>(tt::random_vec<T>(rng, s.N * s.out), s.N, s.out);
  auto dx = tt::to_device<T>(tt::random_vec<T>(rng, s.N * s.in), s.N, s.in);

  tk::linear_forward(exec, x, W, y);
  tk::linear_backward_input(exec, dy, W, dx);
  tk::linear_backward_weight(exec, dy, x, dW);
  exec.fence();

  auto ref_dW = hdW0;
  tptrain::kernels::ref::linear_backward_weight(hdy, hx, s.N, s.in, s.out, ref_dW);
  CHECK(tt::max_rel_err(tt::to_host(y), tk::ref::linear_forward(hx, hW, s.N, s.in, s.out)) <
        tt::tol<T>());
  CHECK(tt::max_rel_err(tt::to_host(dx),
                        tk::ref::linear_backward_input(hdy, hW, s.N, s.in, s.out)) < tt::tol<T>());
  CHECK(tt::max_rel_err(tt::to_host(dW), ref_dW, tt::max_abs(hdW0)) < tt::tol<T>());
}

}  // namespace

TEMPLATE_TEST_CASE("linear forward/backward match naive loops", "[kernels]", float, double) {
  using T = TestType;
  const Shape shape =
      GENERATE(Shape{7, 13, 5}, Shape{1, 1, 1}, Shape{33, 65, 17}, Shape{64, 128, 96});
  INFO("N=" << shape.N << " in=" << shape.in << " out=" << shape.out);
  check_linear<T>(shape, 1234u + static_cast<unsigned>(shape.N));
}

TEMPLATE_TEST_CASE("linear_backward_weight accumulates over micro-batches", "[kernels]", float,
                   double) {
  using T = TestType;
  std::mt19937 rng(7);
  tptrain::kx::ExecSpace exec;
  const int N = 6, in = 5, out = 4;
  const auto hx = tt::random_vec<T>(rng, 2 * N * in);
  const auto hdy = tt::random_vec<T>(rng, 2 * N * out);
  auto x = tt::to_device<T>(hx, 2 * N, in);
  auto dy = tt::to_device<T>(hdy, 2 * N, out);
  tk::Matrix<T> dW_whole("dW_whole", out, in), dW_two("dW_two", out, in);
  tk::linear_backward_weight(exec, dy, x, dW_whole);
  // Two micro-batches as row-range subviews (stay LayoutRight: the BLAS path).
  for (int mb = 0; mb < 2; ++mb) {
    const auto rows = Kokkos::make_pair(mb * N, (mb + 1) * N);
    auto xs = Kokkos::subview(x, rows, Kokkos::ALL);
    auto dys = Kokkos::subview(dy, rows, Kokkos::ALL);
    static_assert(std::is_same<typename decltype(xs)::array_layout, Kokkos::LayoutRight>::value,
                  "row-range subviews of LayoutRight stay LayoutRight");
    tk::linear_backward_weight(exec, dys, xs, dW_two);
  }
  exec.fence();
  CHECK(tt::max_rel_err(tt::to_host(dW_two), tt::to_host(dW_whole)) < tt::tol<T>());
}

TEST_CASE("linear kernels accept unmanaged views and strided subviews", "[kernels]") {
  using T = float;
  std::mt19937 rng(99);
  tptrain::kx::ExecSpace exec;
  const int N = 5, in = 7, out = 3;
  const auto hx = tt::random_vec<T>(rng, N * in);
  const auto hW = tt::random_vec<T>(rng, out * in);
  const auto ref_y = tk::ref::linear_forward(hx, hW, N, in, out);

  // Unmanaged views over one flat buffer (as a flat parameter/activation arena would give).
  auto flat = tt::to_device<T>([&] {
    tt::HostVec all = hx;
    all.insert(all.end(), hW.begin(), hW.end());
    return all;
  }());
  tk::MatrixUnmanaged<const T> x(flat.data(), N, in);
  tk::MatrixUnmanaged<const T> W(flat.data() + N * in, out, in);
  tk::Vector<T> ybuf("ybuf", N * out);
  tk::MatrixUnmanaged<T> y(ybuf.data(), N, out);
  tk::linear_forward(exec, x, W, y);
  exec.fence();
  CHECK(tt::max_rel_err(tt::to_host(y), ref_y) < tt::tol<T>());

  // A column block of a wider activation (LayoutStride): correct through Kokkos Kernels' own
  // kernel (not the BLAS fast path).
  tt::HostVec wide(N * (in + 4), 0.0);
  for (int t = 0; t < N; ++t)
    for (int k = 0; k < in; ++k) wide[t * (in + 4) + 2 + k] = hx[t * in + k];
  auto xw = tt::to_device<T>(wide, N, in + 4);
  auto xs = Kokkos::subview(xw, Kokkos::ALL, Kokkos::make_pair(2, 2 + in));
  auto Wd = tt::to_device<T>(hW, out, in);
  tk::Matrix<T> y2("y2", N, out);
  tk::linear_forward(exec, xs, Wd, y2);
  exec.fence();
  CHECK(tt::max_rel_err(tt::to_host(y2), ref_y) < tt::tol<T>());
}

// Whichever Kokkos backend this test binary runs on (kx::ExecSpace: the default one, or Serial in
// an OpenMP + Serial Kokkos, unit_serial), a LayoutRight float/double GEMM is one call of the
// vendor BLAS and launches no Kokkos kernel: kx::gemm types its views for that execution space
// (compat.hpp, gemm_view), without which Kokkos Kernels ran its own team kernel on Serial.
TEMPLATE_TEST_CASE("linear GEMMs go to the vendor BLAS: one call each, no Kokkos kernel", "[kernels][launches]",
                   float, double) {
  using T = TestType;
  using Exec = tptrain::kx::ExecSpace;
  constexpr bool host = std::is_same<Exec::memory_space, Kokkos::HostSpace>::value;
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  constexpr bool host_blas = true;
#else
  constexpr bool host_blas = false;
#endif
#if defined(KOKKOS_ENABLE_CUDA) && defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS)
  constexpr bool device_blas = std::is_same<Exec, Kokkos::Cuda>::value;
#else
  constexpr bool device_blas = false;
#endif
  if (!(host ? host_blas : device_blas)) {
    WARN("no vendor BLAS for this backend in Kokkos Kernels: its own GEMM kernel runs instead");
    return;
  }
  Exec exec;
  tk::Matrix<T> x("x", 40, 24), W("W", 16, 24), y("y", 40, 16), dx("dx", 40, 24), dW("dW", 16, 24);
  exec.fence();
  namespace lc = tk::launch_count;
  tk::LaunchCounting counting;
  tk::linear_forward(exec, x, W, y);
  tk::linear_backward_input(exec, y, W, dx);
  tk::linear_backward_weight(exec, y, x, dW);
  exec.fence();
  CHECK(lc::total().blas == 3);
  CHECK(lc::total().kernels == 0);
}

TEST_CASE("linear kernels reject mismatched shapes", "[kernels]") {
  tptrain::kx::ExecSpace exec;
  tk::Matrix<float> x("x", 4, 3), W("W", 2, 5), y("y", 4, 2);
  CHECK_THROWS_AS(tk::linear_forward(exec, x, W, y), std::invalid_argument);
}
