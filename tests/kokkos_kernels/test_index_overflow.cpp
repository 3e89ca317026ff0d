// Index arithmetic beyond 32 bits (docs/design.md, "Index types and size limits").
//
// The shapes that overflow an int are far too big to allocate in a test (the score matrix of
// one head at S = 65536 alone is 16 GiB), so these tests use unmanaged views over no memory:
// every size check must come before a kernel touches an element, and the index helpers the
// kernels use are called directly with large values.
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "catch.hpp"
#include "tests/test_helpers.hpp"
#include "kokkos_kernels/kernels.hpp"

using namespace tptrain;

namespace {

constexpr std::int64_t kIntMax = INT_MAX;

template <class T>
using Unmanaged4 = Kokkos::View<T****, Kokkos::LayoutRight, kx::MemSpace,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

using test::length_error_of;
using test::mentions;

}  // namespace

TEST_CASE("team kernels refuse a league beyond int instead of wrapping it", "[kernels][overflow]") {
  const kx::ExecSpace exec;
  // INT_MAX, or 2^30 on the backends whose TeamPolicy overflows on larger leagues (OpenMP).
  const std::int64_t limit = kernels::detail::league_limit<kx::ExecSpace>();
  REQUIRE(kernels::detail::teams(exec, limit).league_size() == limit);
  const std::string over = length_error_of([&] { kernels::detail::teams(exec, limit + 1); });
  CHECK(mentions(over, std::to_string(limit + 1)));
  CHECK(mentions(over, std::to_string(limit)));
  // 2^31 used to become a negative league (no team ran), 2^32 + 3 a league of 3.
  const std::string msg = length_error_of([&] { kernels::detail::teams(exec, kIntMax + 1); });
  CHECK(mentions(msg, "2147483648"));
  CHECK_THROWS_AS(kernels::detail::teams(exec, (std::int64_t(1) << 32) + 3), std::length_error);
  CHECK_THROWS_AS(kernels::detail::teams(exec, -1), std::length_error);
}

TEST_CASE("attention refuses more score rows than one league holds", "[kernels][overflow]") {
  // B * nh * S = 1 * 32768 * 65536 = 2^31 query rows: one past the int range. Nothing is
  // allocated: the views have no memory, so a kernel that ran would crash.
  const kx::ExecSpace exec;
  const std::int64_t B = 1, S = 65536, nh = 32768, d = 1;
  kernels::MatrixUnmanaged<float> qkv(nullptr, B * S, 3 * nh * d);
  kernels::MatrixUnmanaged<float> out(nullptr, B * S, nh * d);
  Unmanaged4<float> att(nullptr, B, nh, S, S);
  kernels::VectorUnmanaged<float> lse(nullptr, B * nh * S);
  const std::string fwd =
      length_error_of([&] { kernels::attention_forward(exec, qkv, out, att, lse, B, S, nh, d); });
  CHECK(mentions(fwd, "attention_forward"));
  CHECK(mentions(fwd, "2147483648"));
  const std::string bwd =
      length_error_of([&] { kernels::attention_backward(exec, out, qkv, lse, qkv, att, att); });
  CHECK(mentions(bwd, "attention_backward"));
  CHECK(mentions(bwd, "2147483648"));
}

TEST_CASE("row-wise team kernels refuse more rows than one league holds", "[kernels][overflow]") {
  const kx::ExecSpace exec;
  const std::int64_t n = kIntMax + 1;
  kernels::MatrixUnmanaged<float> x(nullptr, n, 4);
  kernels::VectorUnmanaged<float> g(nullptr, 4), rows(nullptr, n);
  CHECK_THROWS_AS(kernels::layernorm_forward(exec, x, g, g, x, rows, rows, 1e-5f), std::length_error);
  CHECK_THROWS_AS(kernels::layernorm_backward(exec, x, x, g, rows, rows, x, g, g), std::length_error);
  CHECK_THROWS_AS(kernels::row_max(exec, x, 4, rows), std::length_error);
  CHECK_THROWS_AS(kernels::row_sum_exp(exec, x, rows, 4, rows), std::length_error);
}

TEST_CASE("linear kernels refuse BLAS dimensions beyond int", "[kernels][overflow]") {
  // BLAS (OpenBLAS, cuBLAS) takes 32-bit dimensions: 2^31 + 1 rows used to reach sgemm as a
  // negative M.
  const kx::ExecSpace exec;
  const std::int64_t n = kIntMax + 2;
  kernels::MatrixUnmanaged<float> x(nullptr, n, 2), w(nullptr, 3, 2), y(nullptr, n, 3);
  const std::string msg = length_error_of([&] { kernels::linear_forward(exec, x, w, y); });
  CHECK(mentions(msg, "linear_forward"));
  CHECK(mentions(msg, "2147483649"));
  CHECK_THROWS_AS(kernels::linear_backward_input(exec, y, w, x), std::length_error);
  CHECK_THROWS_AS(kernels::linear_backward_weight(exec, y, x, w), std::length_error);
}

TEST_CASE("attention index helpers stay exact beyond 2^31", "[kernels][overflow]") {
  // The last query row of the largest league: S = 65536, 32767 local heads. The S*S offsets of
  // its scores are far beyond 2^31.
  const std::int64_t S = 65536, nh = 32767;
  const std::int64_t last = S * nh - 1;
  REQUIRE(last <= kIntMax);
  const auto row = kernels::detail::attention_row(last, S, nh);
  CHECK(row.b == 0);
  CHECK(row.h == nh - 1);
  CHECK(row.i == S - 1);
  const auto mid = kernels::detail::attention_row(S * 1000 + 17, S, nh);
  CHECK((mid.b == 0 && mid.h == 1000 && mid.i == 17));
  // Batch 3 of 5 heads: row (3*5 + 4)*S + 9.
  const auto other = kernels::detail::attention_row((3 * 5 + 4) * S + 9, S, 5);
  CHECK((other.b == 3 && other.h == 4 && other.i == 9));
}

TEST_CASE("flat reductions count more than 2^31 elements", "[kernels][overflow]") {
  // A stride-0 view: 2^31 + 7 elements that all alias one value, so the loop bound, not the
  // memory, is beyond int. Σ 1² must count every element once.
  const kx::ExecSpace exec;
  Kokkos::View<double*, kx::MemSpace> one("one", 1);
  Kokkos::deep_copy(one, 1.0);
  const std::int64_t n = kIntMax + 8;
  Kokkos::LayoutStride layout(static_cast<std::size_t>(n), 0);
  Kokkos::View<double*, Kokkos::LayoutStride, kx::MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      many(one.data(), layout);
  REQUIRE(many.extent(0) == static_cast<std::size_t>(n));
  CHECK(kernels::squared_norm(exec, many) == static_cast<double>(n));
}
