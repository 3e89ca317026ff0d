// The block products of flash attention (flash_attention.hpp), on tiles in team scratch:
//   C[m][n] (+)= Σ_k A(m, k) · B[k][n]     m < M, n < N, k < K, in acc_t (float or double)
// A is read through two strides (A(m, k) = a[m·am + k·ak]), so one routine serves Q Kᵀ (A = Q,
// B = Kᵀ stored transposed), P V, dS K, and the transposed dSᵀ Q and Pᵀ dO (am = 1). B and C are
// row-major tiles with leading dimensions ldb, ldc.
//
// Two implementations with the same sums in the same order (k ascending for every element; equal
// up to the compiler's contraction of multiply-adds):
//  * a one-thread host team (Serial, or a team size of 1): a register-blocked micro-kernel, 4 rows
//    of C by up to 64 columns held in vector registers (GNU vector types), a broadcast of A times
//    a row of B per k, fused multiply-adds. Measured on one AVX-512 core at 64×64×64: 180 GFLOP/s
//    with 512-bit vectors and FMAs, against 165-190 for OpenBLAS's large sgemm on the same
//    machine (docs/design.md, "Attention paths").
//  * any other team (CUDA, OpenMP teams of several threads): one element of C per thread.
// Tiles are padded: M must be a multiple of 4 and the tiles' columns a multiple of 16 (the micro-
// kernel reads and writes whole 16-column groups: columns N .. round_up(N, 16) of C receive
// products of B's padding, which the caller never reads back).
#pragma once

#include <cstdint>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

// The micro-kernel is a GEMM, compute-bound: it alone contracts its multiply-adds into FMAs (the
// build's -ffp-contract=off keeps the memory-bound kernels' two code paths bitwise equal; this
// kernel is the host's one path for the products: 110 against 180 GFLOP/s without and with FMAs),
// and it asks GCC for 512-bit vectors where the CPU has them (GCC prefers 256).
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#define TPTRAIN_FLASH_WIDE_VECTORS __attribute__((target("prefer-vector-width=512"), optimize("fp-contract=fast")))
#elif defined(__GNUC__) && !defined(__clang__)
#define TPTRAIN_FLASH_WIDE_VECTORS __attribute__((optimize("fp-contract=fast")))
#else
#define TPTRAIN_FLASH_WIDE_VECTORS
#endif

namespace tptrain::kernels::detail {

// Columns of a flash tile: n rounded up to the micro-kernel's 16-column groups.
KOKKOS_INLINE_FUNCTION std::int64_t flash_padded(const std::int64_t n) { return (n + 15) / 16 * 16; }

#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(__NVCOMPILER)
#define TPTRAIN_FLASH_VECTOR_PANEL 1
// 4 rows × 16·NC columns of C (host only) in GCC vector registers of 64 bytes: the accumulators
// stay in registers (a plain F acc[4][N] array was spilled to the stack by GCC 12: 70 against 165
// GFLOP/s at 64×64×64 on one AVX-512 core). Each element is still summed over k in order.
template <class F, int NC>
TPTRAIN_FLASH_WIDE_VECTORS inline __attribute__((always_inline)) void flash_panel(
    const std::int64_t K, const F* a, const std::int64_t am, const std::int64_t ak, const F* b, const std::int64_t ldb,
    F* c, const std::int64_t ldc, const bool accumulate) {
  typedef F Vec __attribute__((vector_size(64)));
  constexpr int lanes = 64 / sizeof(F), NV = 16 * NC / lanes;  // vectors per row of the panel
  Vec acc[4][NV];
#pragma GCC unroll 16
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 16
    for (int n = 0; n < NV; ++n) {
      if (accumulate) __builtin_memcpy(&acc[r][n], c + r * ldc + lanes * n, sizeof(Vec));
      else acc[r][n] = Vec{};
    }
  for (std::int64_t k = 0; k < K; ++k) {
    Vec bk[NV];
#pragma GCC unroll 16
    for (int n = 0; n < NV; ++n) __builtin_memcpy(&bk[n], b + k * ldb + lanes * n, sizeof(Vec));
#pragma GCC unroll 16
    for (int r = 0; r < 4; ++r) {
      const F ar = a[r * am + k * ak];
#pragma GCC unroll 16
      for (int n = 0; n < NV; ++n) acc[r][n] += ar * bk[n];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 16
    for (int n = 0; n < NV; ++n) __builtin_memcpy(c + r * ldc + lanes * n, &acc[r][n], sizeof(Vec));
}
#else
// 4 rows × 16·NC columns of C (host only), plain loops (compilers without GNU vector types).
template <class F, int NC>
inline void flash_panel(const std::int64_t K, const F* a, const std::int64_t am, const std::int64_t ak, const F* b,
                        const std::int64_t ldb, F* c, const std::int64_t ldc, const bool accumulate) {
  constexpr int N = 16 * NC;
  for (int r = 0; r < 4; ++r)
    for (int n = 0; n < N; ++n) {
      F acc = accumulate ? c[r * ldc + n] : F(0);
      for (std::int64_t k = 0; k < K; ++k) acc += a[r * am + k * ak] * b[k * ldb + n];
      c[r * ldc + n] = acc;
    }
}
#endif

template <class F>
TPTRAIN_FLASH_WIDE_VECTORS inline void flash_block_host(const std::int64_t M, const std::int64_t N, const std::int64_t K,
                                                         const F* a, const std::int64_t am, const std::int64_t ak,
                                                         const F* b, const std::int64_t ldb, F* c,
                                                         const std::int64_t ldc, const bool accumulate) {
  for (std::int64_t m = 0; m < M; m += 4)
    for (std::int64_t n0 = 0; n0 < N; n0 += 64) {
      const F* am0 = a + m * am;
      const F* bn0 = b + n0;
      F* cm = c + m * ldc + n0;
      switch (kx::min<std::int64_t>(4, (N - n0 + 15) / 16)) {
        case 1: flash_panel<F, 1>(K, am0, am, ak, bn0, ldb, cm, ldc, accumulate); break;
        case 2: flash_panel<F, 2>(K, am0, am, ak, bn0, ldb, cm, ldc, accumulate); break;
        case 3: flash_panel<F, 3>(K, am0, am, ak, bn0, ldb, cm, ldc, accumulate); break;
        default: flash_panel<F, 4>(K, am0, am, ak, bn0, ldb, cm, ldc, accumulate); break;
      }
    }
}

// f(i, c) for i < rows, c < cols on a team: nested plain loops on a one-thread host team (no
// division per element, and the inner loop vectorises), one element per thread elsewhere.
template <class Exec, class Member, class Fn>
KOKKOS_FORCEINLINE_FUNCTION void tile_for(const Member& team, const std::int64_t rows, const std::int64_t cols,
                                          const Fn& f) {
  if constexpr (!scratch_rows<Exec>()) {
    if (serial_teams<Exec>() || team.team_size() == 1) {
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t c = 0; c < cols; ++c) f(i, c);
      return;
    }
  }
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * cols),
                       [&](const std::int64_t e) { f(e / cols, e % cols); });
}

// C (+)= A · B on a team; ends with a team barrier (C is read by the whole team next).
template <class Exec, class Member, class F>
KOKKOS_INLINE_FUNCTION void flash_block(const Member& team, const std::int64_t M, const std::int64_t N,
                                        const std::int64_t K, const F* a, const std::int64_t am,
                                        const std::int64_t ak, const F* b, const std::int64_t ldb, F* c,
                                        const std::int64_t ldc, const bool accumulate) {
  if constexpr (!scratch_rows<Exec>()) {
#if !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
    if (serial_teams<Exec>() || team.team_size() == 1) {
      flash_block_host(M, N, K, a, am, ak, b, ldb, c, ldc, accumulate);
      return;
    }
#endif
  }
  const std::int64_t Np = flash_padded(N);
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, M * Np), [&](const std::int64_t e) {
    const std::int64_t m = e / Np, n = e % Np;
    F acc = accumulate ? c[m * ldc + n] : F(0);
    for (std::int64_t k = 0; k < K; ++k) acc += a[m * am + k * ak] * b[k * ldb + n];
    c[m * ldc + n] = acc;
  });
  team.team_barrier();
}

}  // namespace tptrain::kernels::detail
