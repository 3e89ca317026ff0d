// The one place that knows which Kokkos / Kokkos Kernels version we are built against.
// Debian ships Kokkos 3.4.01 (Trilinos 13.2); clusters have Kokkos >= 4 (often CUDA).
// Differences handled here (docs/design.md, "Kokkos rules"): float/double math functions,
// min/max, GEMM with an execution-space instance, labelled fences.
#pragma once

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
template <class T> KOKKOS_INLINE_FUNCTION T log(T x) { return TPTRAIN_MATH_NS::log(x); }
template <class T> KOKKOS_INLINE_FUNCTION T tanh(T x) { return TPTRAIN_MATH_NS::tanh(x); }
template <class T> KOKKOS_INLINE_FUNCTION T cos(T x) { return TPTRAIN_MATH_NS::cos(x); }
template <class T> KOKKOS_INLINE_FUNCTION T sin(T x) { return TPTRAIN_MATH_NS::sin(x); }
template <class T> KOKKOS_INLINE_FUNCTION T fabs(T x) { return TPTRAIN_MATH_NS::fabs(x); }
template <class T> KOKKOS_INLINE_FUNCTION T pow(T x, T y) { return TPTRAIN_MATH_NS::pow(x, y); }
template <class T> KOKKOS_INLINE_FUNCTION bool isfinite(T x) { return TPTRAIN_MATH_NS::isfinite(x); }
template <class T> KOKKOS_INLINE_FUNCTION T max(T a, T b) { return a < b ? b : a; }
template <class T> KOKKOS_INLINE_FUNCTION T min(T a, T b) { return b < a ? b : a; }

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
template <class Exec, class AV, class BV, class CV>
inline void gemm(const Exec& exec, const char* transA, const char* transB,
                 typename CV::const_value_type alpha, const AV& A, const BV& B,
                 typename CV::const_value_type beta, const CV& C) {
  static_assert(!is_half_v<typename AV::value_type> && !is_half_v<typename BV::value_type> &&
                    !is_half_v<typename CV::value_type>,
                "tptrain::kx::gemm: 16-bit operands go through kernels::batched_gemm");
  kernels::launch_count::record(kernels::launch_count::Kind::blas);  // one cuBLAS / BLAS call
#if TPTRAIN_KOKKOS_4
  KokkosBlas::gemm(exec, transA, transB, alpha, A, B, beta, C);
#else
  exec.fence();
  KokkosBlas::gemm(transA, transB, alpha, A, B, beta, C);
#endif
}

}  // namespace tptrain::kx
