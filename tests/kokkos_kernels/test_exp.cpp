// kx::exp for float (kokkos_kernels/compat.hpp): the arithmetic exp of host backends, and the
// device's expf where kernels run on a GPU, against exp in double. Evaluated in a kernel on the
// test's execution space, over every 251st float of the range where exp is neither 0 nor
// infinite, plus the edges: ±0, the overflow and underflow thresholds and their neighbours,
// ±inf and NaN. NaN and the comparisons are done on bits: the test main traps FE_INVALID.
#include <cmath>
#include <cstdint>
#include <vector>

#include "catch.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/views.hpp"

namespace kx = tptrain::kx;

namespace {

using kx::detail::bits_float;
using kx::detail::float_bits;

// kx::exp of every x, computed by a kernel on the test's execution space.
std::vector<float> exp_on_device(const std::vector<float>& x) {
  const auto n = static_cast<std::int64_t>(x.size());
  Kokkos::View<float*, kx::MemSpace> in("exp_in", x.size()), out("exp_out", x.size());
  auto host = Kokkos::create_mirror_view(in);
  for (std::int64_t i = 0; i < n; ++i) host(i) = x[i];
  Kokkos::deep_copy(in, host);
  Kokkos::parallel_for(
      "test_exp", Kokkos::RangePolicy<kx::ExecSpace>(0, n),
      KOKKOS_LAMBDA(const std::int64_t i) { out(i) = kx::exp(in(i)); });
  Kokkos::deep_copy(host, out);
  return std::vector<float>(host.data(), host.data() + n);
}

// |y - exp(x)| in units of the last place of exp(x) rounded to float (2^-149 for subnormals).
double ulp_error(const float x, const float y) {
  const double ref = std::exp(static_cast<double>(x));
  int e;
  std::frexp(ref, &e);  // ref in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs(static_cast<double>(y) - ref) / ulp;
}

constexpr std::uint32_t overflow_bits = 0x42b17217u;   // 88.72283: exp just below FLT_MAX
constexpr std::uint32_t underflow_bits = 0xc2cff1b4u;  // -103.97208: exp rounds to 2^-149

}  // namespace

TEST_CASE("kx::exp of a float is within 1 ulp of exp over its whole finite range", "[exp][kernels]") {
  std::vector<float> x;
  // Positive floats up to the overflow threshold, negative ones down to the underflow one.
  for (std::uint32_t u = 0; u <= overflow_bits; u += 251) x.push_back(bits_float(u));
  for (std::uint32_t u = 0x80000000u; u <= underflow_bits; u += 251) x.push_back(bits_float(u));
  x.push_back(bits_float(overflow_bits));
  x.push_back(bits_float(underflow_bits));
  const std::vector<float> y = exp_on_device(x);
  double worst = 0;
  float worst_x = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double err = ulp_error(x[i], y[i]);
    if (!(err <= worst)) {  // also catches a NaN error
      worst = err;
      worst_x = x[i];
    }
  }
  INFO("worst x = " << worst_x << ", " << worst << " ulp, over " << x.size() << " floats");
  // Cephes' polynomial (host backends) is within 1 ulp; CUDA's expf documents 2.
  const bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, kx::MemSpace>::accessible;
  CHECK(worst < (host ? 1.0 : 2.0));
}

TEST_CASE("kx::exp of a float at the edges: 1, +inf, 0, NaN", "[exp][kernels]") {
  const std::vector<float> x = {0.0f,
                                -0.0f,
                                bits_float(overflow_bits),
                                bits_float(overflow_bits + 1),
                                bits_float(underflow_bits),
                                bits_float(underflow_bits + 1),
                                bits_float(0x7f800000u),   // +inf
                                bits_float(0xff800000u),   // -inf
                                bits_float(0x7fc00000u),   // +NaN
                                bits_float(0xffc00001u)};  // -NaN
  const std::vector<float> y = exp_on_device(x);
  CHECK(float_bits(y[0]) == float_bits(1.0f));  // exactly: the softmax's row maximum contributes 1
  CHECK(float_bits(y[1]) == float_bits(1.0f));
  CHECK(float_bits(y[2]) < 0x7f800000u);  // finite
  CHECK(float_bits(y[2]) > 0x7f7f0000u);  // and within 1 % of FLT_MAX
  CHECK(float_bits(y[3]) == 0x7f800000u);
  CHECK(float_bits(y[4]) == 1u);  // 2^-149, the smallest subnormal
  CHECK(float_bits(y[5]) == 0u);
  CHECK(float_bits(y[6]) == 0x7f800000u);
  CHECK(float_bits(y[7]) == 0u);
  CHECK((float_bits(y[8]) & 0x7fffffffu) > 0x7f800000u);
  CHECK((float_bits(y[9]) & 0x7fffffffu) > 0x7f800000u);
}
