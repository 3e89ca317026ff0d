// Strided-batched GEMM, row-major: for i in [0, batch)
//   C_i = alpha · op(A_i) · op(B_i) + beta · C_i,   X_i = X + i·strideX,  op = 'N' | 'T'
// op(A) is M×K, op(B) is K×N, C is M×N; each matrix is row-major with leading dimension ld
// (element (r, c) of a stored matrix at r·ld + c). The attention core needs it because the
// per-head blocks of Q, K, V are column slices of one [B*S, 3*Hl] buffer (ld = 3*Hl, stride
// between heads d) and its scores are [B, nh, S, S]: one call per batch row covers all heads.
//
// Backends, picked at compile time for Exec:
//  * Exec on host memory with the BLAS TPL: Fortran BLAS (OpenBLAS) per batch entry. BLAS is
//    column-major, and a row-major C = op(A) op(B) is the column-major Cᵀ = op(B)ᵀ op(A)ᵀ, so
//    the operands and M/N are swapped. BLAS runs on the calling host thread: the instance is
//    fenced first so that earlier kernels on it have written A, B and C.
//  * Kokkos::Cuda with the cuBLAS TPL: one cublas{S,D}gemmStridedBatched on the stream of exec.
//  * anything else: batched_gemm_kokkos, one thread per element of C, K summed in order.
// beta == 0 never reads C (BLAS semantics: C may hold NaN). C must not alias A or B.
//
// Limits: M, N, K, the leading dimensions and batch reach BLAS as 32-bit ints and are refused
// above 2^31 - 1 (std::length_error). The batch strides are not: cuBLAS takes them as long long
// and the host loop offsets in 64 bits, and attention's S*S score stride passes 2^31 at S = 46341
// while every dimension is still small.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <KokkosKernels_config.h>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
#include <KokkosBlas_Host_tpl.hpp>
#define TPTRAIN_BATCHED_GEMM_HOST_BLAS 1
#else
#define TPTRAIN_BATCHED_GEMM_HOST_BLAS 0
#endif

#if defined(KOKKOS_ENABLE_CUDA) && defined(KOKKOSKERNELS_ENABLE_TPL_CUBLAS)
#include <KokkosBlas_tpl_spec.hpp>  // CudaBlasSingleton: the cuBLAS handle Kokkos Kernels owns
#define TPTRAIN_BATCHED_GEMM_CUBLAS 1
#else
#define TPTRAIN_BATCHED_GEMM_CUBLAS 0
#endif

namespace tptrain::kernels {

namespace detail {

inline void require_blas_int(std::int64_t value, const char* kernel, const char* name) {
  if (value > int_limit) {
    throw std::length_error(std::string("tptrain::kernels::") + kernel + ": " + name + " = " +
                            std::to_string(value) + " exceeds the BLAS limit " +
                            std::to_string(int_limit) + " (a 32-bit int)");
  }
}

// Shape checks shared by every backend; throws before anything runs.
inline void check_batched_gemm(const char* kernel, char transA, char transB, std::int64_t M,
                               std::int64_t N, std::int64_t K, std::int64_t lda,
                               std::int64_t strideA, std::int64_t ldb, std::int64_t strideB,
                               std::int64_t ldc, std::int64_t strideC, std::int64_t batch) {
  require((transA == 'N' || transA == 'T') && (transB == 'N' || transB == 'T'), kernel,
          "op must be 'N' or 'T'");
  require(M >= 0 && N >= 0 && K >= 0 && batch >= 0, kernel, "M, N, K and batch must be >= 0");
  require(strideA >= 0 && strideB >= 0 && strideC >= 0, kernel, "strides must be >= 0");
  // Row length of each stored row-major matrix; BLAS wants ld >= max(1, it) even when empty.
  const std::int64_t colsA = transA == 'N' ? K : M, colsB = transB == 'N' ? N : K;
  auto at_least = [](std::int64_t cols) { return cols > 1 ? cols : std::int64_t(1); };
  require(lda >= at_least(colsA) && ldb >= at_least(colsB) && ldc >= at_least(N), kernel,
          "leading dimensions must be >= max(1, row length)");
  require_blas_int(M, kernel, "M");
  require_blas_int(N, kernel, "N");
  require_blas_int(K, kernel, "K");
  require_blas_int(lda, kernel, "lda");
  require_blas_int(ldb, kernel, "ldb");
  require_blas_int(ldc, kernel, "ldc");
  require_blas_int(batch, kernel, "batch");
}

// Portable backend (no vendor BLAS for Exec): one thread per element of C, its K products
// summed in order, so results are deterministic. Slow; public so tests can check it on hosts
// that do have BLAS.
template <class Exec, class T>
void batched_gemm_kokkos(const Exec& exec, char transA, char transB, std::int64_t M,
                         std::int64_t N, std::int64_t K, T alpha, const T* A, std::int64_t lda,
                         std::int64_t strideA, const T* B, std::int64_t ldb, std::int64_t strideB,
                         T beta, T* C, std::int64_t ldc, std::int64_t strideC,
                         std::int64_t batch) {
  check_batched_gemm("batched_gemm", transA, transB, M, N, K, lda, strideA, ldb, strideB, ldc,
                     strideC, batch);
  if (M == 0 || N == 0 || batch == 0) return;
  // Step between consecutive k along a row of op(A) / a column of op(B), and between rows /
  // columns of C.
  const std::int64_t a_k = transA == 'N' ? 1 : lda, a_r = transA == 'N' ? lda : 1;
  const std::int64_t b_k = transB == 'N' ? ldb : 1, b_c = transB == 'N' ? 1 : ldb;
  Kokkos::parallel_for(
      "tptrain::kernels::batched_gemm", range2d(exec, batch * M, N),
      KOKKOS_LAMBDA(const std::int64_t ir, const std::int64_t c) {
        const std::int64_t i = ir / M, r = ir % M;
        const T* a = A + i * strideA + r * a_r;
        const T* b = B + i * strideB + c * b_c;
        T acc = 0;
        for (std::int64_t k = 0; k < K; ++k) acc += a[k * a_k] * b[k * b_k];
        T& out = C[i * strideC + r * ldc + c];
        out = beta == T(0) ? alpha * acc : alpha * acc + beta * out;
      });
}

#if TPTRAIN_BATCHED_GEMM_CUBLAS
inline cublasStatus_t cublas_gemm_strided_batched(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const float* alpha, const float* A, int lda, long long sA, const float* B, int ldb,
    long long sB, const float* beta, float* C, int ldc, long long sC, int batch) {
  return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C,
                                   ldc, sC, batch);
}
inline cublasStatus_t cublas_gemm_strided_batched(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const double* alpha, const double* A, int lda, long long sA, const double* B, int ldb,
    long long sB, const double* beta, double* C, int ldc, long long sC, int batch) {
  return cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C,
                                   ldc, sC, batch);
}
#endif

}  // namespace detail

template <class Exec, class T>
void batched_gemm(const Exec& exec, char transA, char transB, std::int64_t M, std::int64_t N,
                  std::int64_t K, T alpha, const T* A, std::int64_t lda, std::int64_t strideA,
                  const T* B, std::int64_t ldb, std::int64_t strideB, T beta, T* C,
                  std::int64_t ldc, std::int64_t strideC, std::int64_t batch) {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                "tptrain::kernels::batched_gemm: float or double");
  detail::check_batched_gemm("batched_gemm", transA, transB, M, N, K, lda, strideA, ldb,
                             strideB, ldc, strideC, batch);
  if (M == 0 || N == 0 || batch == 0) return;
#if TPTRAIN_BATCHED_GEMM_CUBLAS
  if constexpr (std::is_same<Exec, Kokkos::Cuda>::value) {
    auto& blas = KokkosBlas::Impl::CudaBlasSingleton::singleton();
    // The handle is shared with Kokkos Kernels: put its stream back afterwards.
    cudaStream_t previous = nullptr;
    if (cublasGetStream(blas.handle, &previous) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(blas.handle, exec.cuda_stream()) != CUBLAS_STATUS_SUCCESS) {
      throw std::runtime_error("tptrain::kernels::batched_gemm: cannot set the cuBLAS stream");
    }
    auto op = [](char t) { return t == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T; };
    const cublasStatus_t status = detail::cublas_gemm_strided_batched(
        blas.handle, op(transB), op(transA), static_cast<int>(N), static_cast<int>(M),
        static_cast<int>(K), &alpha, B, static_cast<int>(ldb), strideB, A,
        static_cast<int>(lda), strideA, &beta, C, static_cast<int>(ldc), strideC,
        static_cast<int>(batch));
    cublasSetStream(blas.handle, previous);
    if (status != CUBLAS_STATUS_SUCCESS) {
      throw std::runtime_error("tptrain::kernels::batched_gemm: cuBLAS status " +
                               std::to_string(static_cast<int>(status)));
    }
    return;
  }
#endif
#if TPTRAIN_BATCHED_GEMM_HOST_BLAS
  if constexpr (std::is_same<typename Exec::memory_space, Kokkos::HostSpace>::value) {
    kx::fence(exec, "tptrain::kernels::batched_gemm::host_blas");
    for (std::int64_t i = 0; i < batch; ++i) {
      KokkosBlas::Impl::HostBlas<T>::gemm(
          transB, transA, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), alpha,
          B + i * strideB, static_cast<int>(ldb), A + i * strideA, static_cast<int>(lda), beta,
          C + i * strideC, static_cast<int>(ldc));
    }
    return;
  }
#endif
  detail::batched_gemm_kokkos(exec, transA, transB, M, N, K, alpha, A, lda, strideA, B, ldb,
                              strideB, beta, C, ldc, strideC, batch);
}

}  // namespace tptrain::kernels
