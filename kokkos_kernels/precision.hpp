// The 16-bit storage types of mixed-precision training and the type every kernel accumulates in.
//
// bf16 (bfloat16: 1 sign, 8 exponent, 7 mantissa bits) and fp16 (IEEE binary16: 1, 5, 10) are
// STORAGE types: a value converts to float for every operation (implicitly: `a * b` of two bf16
// is a float product) and back with round-to-nearest-even when stored. Kernels therefore compute
// in acc_t<T> (float for the 16-bit types, T itself for float/double) and round once, when they
// write an output. The conversions are bit manipulations, the same on every backend and compiler
// (no __nv_bfloat16 intrinsics, no x86 F16C): results are reproducible across CPU and GPU, and the
// bit layouts equal CUDA's __nv_bfloat16 / __half, so cuBLAS and NCCL read these buffers directly.
// Kokkos 3.4 has no bhalf_t (../docs/design.md, "Kokkos rules"), hence our own types.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <Kokkos_Core.hpp>

namespace tptrain::kx {

namespace detail {

KOKKOS_INLINE_FUNCTION std::uint32_t float_bits(const float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
KOKKOS_INLINE_FUNCTION float bits_float(const std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// float -> bf16 bits, round to nearest, ties to even; NaN stays a (quiet) NaN, ±Inf stays.
KOKKOS_INLINE_FUNCTION std::uint16_t bf16_bits_from_float(const float f) {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
KOKKOS_INLINE_FUNCTION float float_from_bf16_bits(const std::uint16_t b) {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

// float -> IEEE binary16 bits, round to nearest, ties to even, subnormals included; values at or
// above 65520 (the midpoint past the largest half, 65504) become Inf, as IEEE rounding says.
KOKKOS_INLINE_FUNCTION std::uint16_t fp16_bits_from_float(const float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // Inf, or rounds to it
  if (a >= 0x38800000u) {  // normal half: rebias the exponent (127 -> 15), round off 13 bits
    const std::uint32_t r = a - 0x38000000u;
    return static_cast<std::uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  if (a < 0x33000000u) return static_cast<std::uint16_t>(sign);  // below half the smallest subnormal
  // Subnormal half: value = m · 2^(e-150) with the implicit bit; the half counts units of 2^-24.
  const std::uint32_t e = a >> 23;
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - e;  // 14..24 bits dropped
  const std::uint32_t kept = m >> shift;
  const std::uint32_t rest = m & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  const std::uint32_t up = rest > half || (rest == half && (kept & 1u));
  return static_cast<std::uint16_t>(sign | (kept + up));
}
KOKKOS_INLINE_FUNCTION float float_from_fp16_bits(const std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return bits_float(sign | 0x7f800000u | (m << 13));  // Inf / NaN
  if (e != 0) return bits_float(sign | ((e + 112u) << 23) | (m << 13));
  // Zero or subnormal: m · 2^-24 is exact in float.
  const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

// The two bit formats, as Storage16 reads them.
struct BFloat16Format {
  static KOKKOS_INLINE_FUNCTION std::uint16_t from_float(const float f) { return bf16_bits_from_float(f); }
  static KOKKOS_INLINE_FUNCTION float to_float(const std::uint16_t b) { return float_from_bf16_bits(b); }
};
struct Float16Format {
  static KOKKOS_INLINE_FUNCTION std::uint16_t from_float(const float f) { return fp16_bits_from_float(f); }
  static KOKKOS_INLINE_FUNCTION float to_float(const std::uint16_t b) { return float_from_fp16_bits(b); }
};

}  // namespace detail

// A trivially copyable 16-bit value of Format (View<bf16*> zero-initialises like View<float*>),
// implicitly widened to float and implicitly rounded from it.
template <class Format>
struct Storage16 {
  std::uint16_t bits;
  Storage16() = default;
  KOKKOS_INLINE_FUNCTION Storage16(const float f) : bits(Format::from_float(f)) {}
  KOKKOS_INLINE_FUNCTION operator float() const { return Format::to_float(bits); }
  KOKKOS_INLINE_FUNCTION Storage16& operator+=(const float v) { return *this = Storage16(float(*this) + v); }
  KOKKOS_INLINE_FUNCTION Storage16& operator-=(const float v) { return *this = Storage16(float(*this) - v); }
  KOKKOS_INLINE_FUNCTION Storage16& operator*=(const float v) { return *this = Storage16(float(*this) * v); }
};

using bf16 = Storage16<detail::BFloat16Format>;
using fp16 = Storage16<detail::Float16Format>;

static_assert(sizeof(bf16) == 2 && std::is_trivially_copyable<bf16>::value, "bf16 is 16 bits");
static_assert(sizeof(fp16) == 2 && std::is_trivially_copyable<fp16>::value, "fp16 is 16 bits");

template <class T>
struct is_half : std::false_type {};
template <class Format>
struct is_half<Storage16<Format>> : std::true_type {};
template <class T>
constexpr bool is_half_v = is_half<std::remove_cv_t<T>>::value;

// The type a kernel computes and accumulates in for storage type T.
template <class T>
using acc_t = std::conditional_t<is_half_v<T>, float, std::remove_cv_t<T>>;

// x as To, through acc_t<From>: a 16-bit value widens to float first, so that any two of bf16,
// fp16, float and double convert (C++ allows one user-defined conversion per implicit conversion,
// and bf16 -> fp16 would take two). Between float and double this is the built-in conversion.
// A double reaches a 16-bit type through float (double rounding, off by one 16-bit ulp in rare
// ties; every float input rounds exactly once).
template <class To, class From>
KOKKOS_INLINE_FUNCTION To convert_to(const From x) {
  return static_cast<To>(static_cast<acc_t<From>>(x));
}

// Largest finite value of a storage type (what a loss-scaled fp16 gradient must stay below).
template <class T>
constexpr float max_finite() {
  if constexpr (std::is_same<std::remove_cv_t<T>, fp16>::value) return 65504.0f;
  else if constexpr (std::is_same<std::remove_cv_t<T>, bf16>::value) return 3.38953139e38f;
  else return 3.40282347e38f;
}

template <class T>
constexpr const char* precision_name() {
  if constexpr (std::is_same<std::remove_cv_t<T>, bf16>::value) return "bf16";
  else if constexpr (std::is_same<std::remove_cv_t<T>, fp16>::value) return "fp16";
  else if constexpr (std::is_same<std::remove_cv_t<T>, double>::value) return "fp64";
  else return "fp32";
}

}  // namespace tptrain::kx
