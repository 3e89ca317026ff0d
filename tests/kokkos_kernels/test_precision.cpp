// kx::bf16 / kx::fp16 conversions (kokkos_kernels/precision.hpp) against independent
// references: round-to-nearest-even worked out in double from the format's definition, GCC's
// _Float16 where the compiler has it, and the exhaustive round trip of every 16-bit pattern.
// NaN is recognised from the bits only: a comparison or isnan on a signalling NaN would raise
// FE_INVALID, which the test main traps.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "catch.hpp"
#include "kokkos_kernels/precision.hpp"

namespace kx = tptrain::kx;

namespace {

std::uint32_t bits_of(const float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_of(const std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
bool is_nan_bits(const std::uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

// A binary floating-point format: p significant bits, smallest normal exponent emin, largest
// finite value.
struct Format {
  int p, emin;
  double max_finite;
};
constexpr Format bf16_format{8, -126, 3.3895313892515355e38};  // (2 - 2^-7) 2^127
constexpr Format fp16_format{11, -14, 65504.0};

// v (a finite float) rounded to nearest, ties to even, in format f; ±inf past the overflow
// threshold. In double: v / spacing is exact (a power-of-two scaling of a 24-bit significand),
// and nearbyint rounds it half-to-even in the default rounding mode.
double round_reference(const double v, const Format& f) {
  if (v == 0) return v;
  int e;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  const int lead = std::max(e - 1, f.emin);
  const double spacing = std::ldexp(1.0, lead - (f.p - 1));
  const double r = std::nearbyint(v / spacing) * spacing;
  if (std::fabs(r) > f.max_finite) return v > 0 ? HUGE_VAL : -HUGE_VAL;
  return r;
}

// The floats every rounding test runs through: random bit patterns over the whole range, and
// for every exponent the patterns around the two formats' rounding boundaries (below, at and
// above a tie, with even and odd kept bits), fp16's subnormal range and its overflow threshold.
std::vector<float> test_floats() {
  std::vector<float> v;
  std::mt19937 rng(2024);
  for (int n = 0; n < (1 << 18); ++n) v.push_back(float_of(static_cast<std::uint32_t>(rng())));
  for (std::uint32_t sign : {0u, 0x80000000u})
    for (std::uint32_t e = 0; e < 255; ++e)
      for (int rep = 0; rep < 4; ++rep) {
        const std::uint32_t m = static_cast<std::uint32_t>(rng()) & 0x7fffffu;
        for (std::uint32_t low : {0x7fffu, 0x8000u, 0x8001u, 0x0000u})  // bf16: 16 dropped bits
          v.push_back(float_of(sign | (e << 23) | (m & 0x7f0000u) | low));
        for (std::uint32_t low : {0x0fffu, 0x1000u, 0x1001u})  // fp16 normals: 13 dropped bits
          v.push_back(float_of(sign | (e << 23) | (m & 0x7fe000u) | low));
      }
  // fp16 subnormals and the gap below them: k · 2^-25 (odd k: a tie) and neighbours.
  for (int k = 0; k <= 4096; ++k) {
    const float x = std::ldexp(static_cast<float>(k), -25);
    for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, 1.0f)}) {
      v.push_back(y);
      v.push_back(-y);
    }
  }
  for (float x : {65504.0f, 65519.99f, 65520.0f, 65536.0f, 6.0e-8f, 5.96e-8f, 2.98e-8f,
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::infinity()})
    for (float s : {1.0f, -1.0f}) v.push_back(s * x);
  return v;
}

template <class H>
void check_rounding(const Format& format) {
  std::int64_t checked = 0, failed = 0;
  for (const float x : test_floats()) {
    if (is_nan_bits(bits_of(x))) continue;
    const float got = H(x);
    const double want = round_reference(x, format);
    if (!(static_cast<double>(got) == want && std::signbit(got) == std::signbit(want))) {
      if (++failed <= 5) {
        INFO(kx::precision_name<H>() << "(" << x << " = 0x" << std::hex << bits_of(x)
                                     << ") = " << got << ", want " << want);
        CHECK(false);
      }
    }
    ++checked;
  }
  CHECK(failed == 0);
  CHECK(checked > 250000);
}

}  // namespace

TEST_CASE("bf16 rounds to nearest even", "[kernels][precision]") {
  check_rounding<kx::bf16>(bf16_format);
  // The edges by name: a tie rounds to the even neighbour, the largest float overflows.
  CHECK(kx::bf16(float_of(0x3f808000u)).bits == 0x3f80);              // 1 + 2^-8: tie, 1 is even
  CHECK(kx::bf16(float_of(0x3f818000u)).bits == 0x3f82);              // tie, 0x3f81 is odd
  CHECK(kx::bf16(std::numeric_limits<float>::max()).bits == 0x7f80);  // Inf
  CHECK(kx::bf16(float_of(0x7f7f7fffu)).bits == 0x7f7f);  // just below the overflow midpoint
}

TEST_CASE("fp16 rounds to nearest even, subnormals and overflow included", "[kernels][precision]") {
  check_rounding<kx::fp16>(fp16_format);
  CHECK(kx::fp16(65504.0f).bits == 0x7bff);
  CHECK(kx::fp16(std::nextafter(65520.0f, 0.0f)).bits == 0x7bff);
  CHECK(kx::fp16(65520.0f).bits == 0x7c00);  // the midpoint to 65536 ties to even: Inf
  CHECK(kx::fp16(-65520.0f).bits == 0xfc00);
  CHECK(kx::fp16(std::ldexp(1.0f, -24)).bits == 0x0001);   // smallest subnormal
  CHECK(kx::fp16(std::ldexp(1.0f, -25)).bits == 0x0000);   // half of it: tie to even 0
  CHECK(kx::fp16(std::ldexp(3.0f, -25)).bits == 0x0002);   // 1.5 units: tie to even 2
  CHECK(kx::fp16(-std::ldexp(1.0f, -26)).bits == 0x8000);  // -0
}

#ifdef __FLT16_MAX__
TEST_CASE("fp16 equals GCC's _Float16 conversion", "[kernels][precision]") {
  std::int64_t failed = 0;
  for (const float x : test_floats()) {
    if (is_nan_bits(bits_of(x))) continue;
    const _Float16 h = static_cast<_Float16>(x);
    std::uint16_t want;
    std::memcpy(&want, &h, sizeof want);
    if (kx::fp16(x).bits != want && ++failed <= 5) {
      INFO("x = " << x << ": 0x" << std::hex << kx::fp16(x).bits << ", _Float16 0x" << want);
      CHECK(false);
    }
  }
  CHECK(failed == 0);
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {                  // widening: every finite pattern
    if ((b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0) continue;  // NaN
    _Float16 h;
    const auto b16 = static_cast<std::uint16_t>(b);
    std::memcpy(&h, &b16, sizeof h);
    kx::fp16 ours;
    ours.bits = b16;
    if (bits_of(static_cast<float>(h)) != bits_of(static_cast<float>(ours)) && ++failed <= 5) {
      INFO("fp16 0x" << std::hex << b);
      CHECK(false);
    }
  }
  CHECK(failed == 0);
}
#endif

TEST_CASE("every bf16 and fp16 pattern round-trips through float", "[kernels][precision]") {
  std::int64_t bad_bf16 = 0, bad_fp16 = 0, bad_value = 0;
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const auto b16 = static_cast<std::uint16_t>(b);
    kx::bf16 x;
    x.bits = b16;
    const float fx = x;
    if (bits_of(fx) != b << 16) ++bad_value;  // widening is exact: the high half of a float
    const kx::bf16 bx(fx);
    const bool nan_x = (b & 0x7fffu) > 0x7f80u;
    if (nan_x ? !is_nan_bits(bits_of(float(bx))) : bx.bits != b16) ++bad_bf16;

    kx::fp16 y;
    y.bits = b16;
    const float fy = y;
    const bool nan_y = (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0;
    if (!nan_y) {  // the value by its definition: (-1)^s · 2^(e-15) · (1.m), or m · 2^-24
      const std::uint32_t e = (b >> 10) & 0x1fu, m = b & 0x3ffu;
      const double mag = e == 0x1f ? HUGE_VAL
                         : e == 0
                             ? std::ldexp(static_cast<double>(m), -24)
                             : std::ldexp(static_cast<double>(1024 + m), static_cast<int>(e) - 25);
      const double want = (b & 0x8000u) ? -mag : mag;
      if (!(static_cast<double>(fy) == want && std::signbit(fy) == std::signbit(want))) ++bad_value;
    }
    const kx::fp16 by(fy);
    if (nan_y ? !is_nan_bits(bits_of(float(by))) : by.bits != b16) ++bad_fp16;
  }
  CHECK(bad_value == 0);
  CHECK(bad_bf16 == 0);
  CHECK(bad_fp16 == 0);
  // NaN from float stays NaN in both (quiet and signalling, either sign).
  for (std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00001u, 0x7fbfffffu}) {
    CHECK(is_nan_bits(bits_of(float(kx::bf16(float_of(nan))))));
    CHECK(is_nan_bits(bits_of(float(kx::fp16(float_of(nan))))));
  }
}

TEST_CASE("acc_t and is_half_v", "[kernels][precision]") {
  STATIC_REQUIRE(std::is_same<kx::acc_t<kx::bf16>, float>::value);
  STATIC_REQUIRE(std::is_same<kx::acc_t<const kx::fp16>, float>::value);
  STATIC_REQUIRE(std::is_same<kx::acc_t<float>, float>::value);
  STATIC_REQUIRE(std::is_same<kx::acc_t<double>, double>::value);
  STATIC_REQUIRE(kx::is_half_v<const kx::bf16>);
  STATIC_REQUIRE(!kx::is_half_v<float>);
  // bf16 -> fp16 takes two user-defined conversions; convert_to goes through float.
  CHECK(kx::convert_to<kx::fp16>(kx::bf16(1.5f)).bits == kx::fp16(1.5f).bits);
  CHECK(kx::convert_to<double>(kx::bf16(0.1f)) == static_cast<double>(float(kx::bf16(0.1f))));
}
