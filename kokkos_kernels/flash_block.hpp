// The block products of flash attention (flash_attention.hpp), on tiles in team scratch:
//   C[m][n] (+)= Σ_k A(m, k) · B[k][n]     m < M, n < N, k < K, in acc_t (float or double)
// A is read through two strides (A(m, k) = a[m·am + k·ak]), so one routine serves Q Kᵀ (A = Q,
// B = Kᵀ stored transposed), P V, dS K, and the transposed dSᵀ Q and Pᵀ dO (am = 1). B and C are
// row-major tiles with leading dimensions ldb, ldc.
//
// Two implementations with the same sums in the same order (k ascending for every element), so
// their results are bitwise equal:
//  * a one-thread host team (Serial, or a team size of 1): a register-blocked micro-kernel, 4 rows
//    of C by up to 64 columns held in vector registers, a broadcast of A times a row of B per k.
//    Measured on one AVX-512 core at 64×64×64: 70 GFLOP/s with 512-bit vectors, 49 with GCC's
//    default 256-bit preference, against 145 for OpenBLAS's large sgemm (docs/design.md,
//    "Attention").
//  * any other team (CUDA, OpenMP teams of several threads): one element of C per thread.
// Tiles are padded: M must be a multiple of 4 and the tiles' columns a multiple of 16 (the micro-
// kernel reads and writes whole 16-column groups: columns N .. round_up(N, 16) of C receive
// products of B's padding, which the caller never reads back).
#pragma once

#include <cstdint>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#define TPTRAIN_FLASH_WIDE_VECTORS __attribute__((target("prefer-vector-width=512")))
#else
#define TPTRAIN_FLASH_WIDE_VECTORS
#endif

namespace tptrain::kernels::detail {

// Columns of a flash tile: n rounded up to the micro-kernel's 16-column groups.
KOKKOS_INLINE_FUNCTION std::int64_t flash_padded(const std::int64_t n) { return (n + 15) / 16 * 16; }

// 4 rows × 16·NC columns of C (host only).
template <class F, int NC>
TPTRAIN_FLASH_WIDE_VECTORS inline __attribute__((always_inline)) void flash_panel(
    const std::int64_t K, const F* a, const std::int64_t am, const std::int64_t ak, const F* b, const std::int64_t ldb,
    F* c, const std::int64_t ldc, const bool accumulate) {
  constexpr int N = 16 * NC;
  F acc[4][N];
  for (int r = 0; r < 4; ++r)
    for (int n = 0; n < N; ++n) acc[r][n] = accumulate ? c[r * ldc + n] : F(0);
  for (std::int64_t k = 0; k < K; ++k) {
    const F* bk = b + k * ldb;
    const F a0 = a[k * ak], a1 = a[am + k * ak], a2 = a[2 * am + k * ak], a3 = a[3 * am + k * ak];
    for (int n = 0; n < N; ++n) {
      const F bn = bk[n];
      acc[0][n] += a0 * bn;
      acc[1][n] += a1 * bn;
      acc[2][n] += a2 * bn;
      acc[3][n] += a3 * bn;
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int n = 0; n < N; ++n) c[r * ldc + n] = acc[r][n];
}

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
