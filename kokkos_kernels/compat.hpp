// The one place that knows which Kokkos / Kokkos Kernels version we are built against.
// Debian ships Kokkos 3.4.01 (Trilinos 13.2); clusters have Kokkos >= 4 (often CUDA).
// Differences handled here (docs/design.md, "Kokkos rules"): float/double math functions,
// min/max, GEMM with an execution-space instance (and on views typed for it), labelled fences.
#pragma once

#include <cmath>

#include <Kokkos_Core.hpp>
#include <KokkosBlas3_gemm.hpp>

#include "kokkos_kernels/launch_count.hpp"
#include "kokkos_kernels/precision.hpp"

#if KOKKOS_VERSION >= 40000
#define TPTRAIN_KOKKOS_4 1
#else
#define TPTRAIN_KOKKOS_4 0
#endif

namespace tptrain::kx {

// The execution space of the whole program: Kokkos' default, unless a build target names another
// enabled one (tests/CMakeLists.txt compiles the kernel and layer tests once per enabled host
// backend with TPTRAIN_EXEC_SPACE=Kokkos::Serial etc.).
#if defined(TPTRAIN_EXEC_SPACE)
using ExecSpace = TPTRAIN_EXEC_SPACE;
#else
using ExecSpace = Kokkos::DefaultExecutionSpace;
#endif
using MemSpace = ExecSpace::memory_space;
// Host memory for staging device data through the host (MPI without device support): pinned on
// CUDA, so that copies to and from it are asynchronous DMA.
#if defined(KOKKOS_ENABLE_CUDA)
using StagingSpace = Kokkos::CudaHostPinnedSpace;
#else
using StagingSpace = Kokkos::HostSpace;
#endif

// ---- math on float/double, callable in kernels ---------------------------------------------
#if TPTRAIN_KOKKOS_4
#define TPTRAIN_MATH_NS Kokkos
#else
#define TPTRAIN_MATH_NS Kokkos::Experimental
#endif

template <class T> KOKKOS_INLINE_FUNCTION T sqrt(T x) { return TPTRAIN_MATH_NS::sqrt(x); }
template <class T> KOKKOS_INLINE_FUNCTION T exp(T x) { return TPTRAIN_MATH_NS::exp(x); }

namespace detail {
// exp of a float in arithmetic only (Cephes expf: x = n ln2 + r, |r| <= ln2/2, a degree-7
// polynomial for exp(r), times 2^n built from its bits), within 1 ulp of exp over the whole float
// range (tests/kokkos_kernels/test_exp.cpp sweeps it). Why not libm's expf on the host: a call per
// element, so no loop that calls it is ever vectorised (GCC vectorises libm only under
// -ffast-math), and exp is the bulk of GELU, the attention softmax and the loss on CPUs. This has
// no call and no branch: GCC vectorises a loop over it at -O3 with plain SSE2 (2x libm per element
// on one core). Hence also the range checks on the bits, selected by masks: float comparisons
// under GCC's default -ftrapping-math, and selects whose arms it can fold to constants, become
// branches, which stop the vectoriser. Nothing here raises FE_INVALID (tests trap it).
// exp(0) = 1 exactly (the softmax relies on its row maximum contributing exactly 1);
// x > 88.7228 gives +inf, x < -103.972 gives 0, NaN stays NaN.
KOKKOS_INLINE_FUNCTION std::uint32_t mask_if(const bool c) { return 0u - static_cast<std::uint32_t>(c); }
KOKKOS_INLINE_FUNCTION std::uint32_t select_bits(const std::uint32_t m, const std::uint32_t a,
                                                 const std::uint32_t b) {
  return (a & m) | (b & ~m);
}
KOKKOS_FORCEINLINE_FUNCTION float exp_float_arithmetic(const float x) {
  constexpr std::uint32_t hi = 0x42b17217u;  // 88.72283: the largest float whose exp is finite
  constexpr std::uint32_t lo = 0xc2cff1b4u;  // -103.97208: the smallest whose exp is not 0
  const std::uint32_t k = float_bits(x);
  const std::uint32_t nan = mask_if((k & 0x7fffffffu) > 0x7f800000u);
  const std::uint32_t above = mask_if(static_cast<std::int32_t>(k) > static_cast<std::int32_t>(hi)) & ~nan;
  const std::uint32_t below = mask_if(k > lo) & ~nan;  // negative floats: larger bits, smaller value
  // Out of range: 89 (whose exp overflows to +inf below) or -104 (whose exp rounds to 0). NaN
  // flows through r into the result; n is computed from 0 instead (converting NaN to int is
  // undefined and raises FE_INVALID).
  const std::uint32_t kc = select_bits(above, 0x42b20000u, select_bits(below, 0xc2d00000u, k));
  const float xc = bits_float(kc);
  const float xn = bits_float(kc & ~nan);
  // n = round(x / ln2) by the 1.5·2^23 trick (SSE2 has no rounding instruction): |x/ln2| < 2^22.
  constexpr float round_magic = 12582912.0f;
  const float fn = (xn * 1.44269504088896341f + round_magic) - round_magic;
  // r = x - n ln2 with ln2 split in two (the first part has 9 bits, so n·C1 is exact).
  const float r = (xc - fn * 0.693359375f) - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * (r * r) + r + 1.0f;
  // 2^n for n in [-150, 128] as 2^n1 · 2^n2, both normal (n1 = floor(n/2), n2 = n - n1); the
  // last product rounds once, into the subnormals or to +inf where exp does.
  const std::int32_t n = static_cast<std::int32_t>(fn);
  const std::int32_t n1 = n >> 1;
  const std::int32_t n2 = n - n1;
  return er * bits_float(static_cast<std::uint32_t>(n1 + 127) << 23) *
         bits_float(static_cast<std::uint32_t>(n2 + 127) << 23);
}
}  // namespace detail

// float: the arithmetic exp on the host, the device's own expf (a few instructions on the SFU)
// in device code.
KOKKOS_FORCEINLINE_FUNCTION float exp(const float x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__) || defined(__SYCL_DEVICE_ONLY__)
  return TPTRAIN_MATH_NS::exp(x);
#else
  return detail::exp_float_arithmetic(x);
#endif
}
template <class T> KOKKOS_INLINE_FUNCTION T log(T x) { return TPTRAIN_MATH_NS::log(x); }
template <class T> KOKKOS_INLINE_FUNCTION T tanh(T x) { return TPTRAIN_MATH_NS::tanh(x); }
template <class T> KOKKOS_INLINE_FUNCTION T cos(T x) { return TPTRAIN_MATH_NS::cos(x); }
template <class T> KOKKOS_INLINE_FUNCTION T sin(T x) { return TPTRAIN_MATH_NS::sin(x); }
template <class T> KOKKOS_INLINE_FUNCTION T fabs(T x) { return TPTRAIN_MATH_NS::fabs(x); }
template <class T> KOKKOS_INLINE_FUNCTION T pow(T x, T y) { return TPTRAIN_MATH_NS::pow(x, y); }
template <class T> KOKKOS_INLINE_FUNCTION bool isfinite(T x) { return TPTRAIN_MATH_NS::isfinite(x); }
template <class T> KOKKOS_INLINE_FUNCTION T max(T a, T b) { return a < b ? b : a; }
template <class T> KOKKOS_INLINE_FUNCTION T min(T a, T b) { return b < a ? b : a; }
// +inf of a float type (HUGE_VAL: a constant, usable in device code).
template <class T> KOKKOS_INLINE_FUNCTION T infinity() { return static_cast<T>(HUGE_VAL); }

#undef TPTRAIN_MATH_NS

// ---- fences --------------------------------------------------------------------------------
template <class Exec>
inline void fence(const Exec& exec, const char* label) {
#if TPTRAIN_KOKKOS_4
  exec.fence(label);
#else
  (void)label;
  exec.fence();
#endif
}

// ---- GEMM: C = alpha * op(A) op(B) + beta * C on the stream of `exec` ----------------------
// Kokkos Kernels >= 4 takes the execution-space instance (cuBLAS gets its stream); 3.4 runs on
// the default instance, so we fence the caller's instance first to keep the ordering honest.
// float and double only: Kokkos Kernels runs its own slow kernel on 16-bit types instead of
// cuBLAS, so 16-bit GEMMs go through kernels::batched_gemm (batched_gemm.hpp, gemm.hpp).
//
// The views are handed over re-typed as unmanaged views of the same data and layout on
// Device<Exec, their memory space> (gemm_view). Kokkos Kernels picks the vendor BLAS only when
// every view's device type is Device<Exec, space> of the execution space it runs on, and a
// View<T**, HostSpace> carries the DEFAULT host execution space: in a Kokkos with OpenMP and
// Serial, a GEMM on Kokkos::Serial over such views ran Kokkos Kernels' own team kernel
// ("KokkosBlas::gemm[NT]", one Kokkos launch per GEMM and far slower than OpenBLAS) instead of
// sgemm. Device views of a CUDA build are Device<Cuda, CudaSpace> already (cuBLAS either way).
template <class Exec, class V>
auto gemm_view(const V& v) {
  return Kokkos::View<typename V::data_type, typename V::array_layout,
                      Kokkos::Device<Exec, typename V::memory_space>,
                      Kokkos::MemoryTraits<Kokkos::Unmanaged>>(v);
}

template <class Exec, class AV, class BV, class CV>
inline void gemm(const Exec& exec, const char* transA, const char* transB,
                 typename CV::const_value_type alpha, const AV& A, const BV& B,
                 typename CV::const_value_type beta, const CV& C) {
  static_assert(!is_half_v<typename AV::value_type> && !is_half_v<typename BV::value_type> &&
                    !is_half_v<typename CV::value_type>,
                "tptrain::kx::gemm: 16-bit operands go through kernels::batched_gemm");
  kernels::launch_count::record(kernels::launch_count::Kind::blas);  // one cuBLAS / BLAS call
  const auto a = gemm_view<Exec>(A);
  const auto b = gemm_view<Exec>(B);
  const auto c = gemm_view<Exec>(C);
#if TPTRAIN_KOKKOS_4
  KokkosBlas::gemm(exec, transA, transB, alpha, a, b, beta, c);
#else
  exec.fence();
  KokkosBlas::gemm(transA, transB, alpha, a, b, beta, c);
#endif
}

}  // namespace tptrain::kx
