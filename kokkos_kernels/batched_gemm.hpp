// Strided-batched GEMM, row-major: for i in [0, batch)
//   C_i = alpha · op(A_i) · op(B_i) + beta · C_i,   X_i = X + i·strideX,  op = 'N' | 'T'
// op(A) is M×K, op(B) is K×N, C is M×N; each matrix is row-major with leading dimension ld
// (element (r, c) of a stored matrix at r·ld + c). The attention core needs it because the
// per-head blocks of Q, K, V are column slices of one [B*S, 3*Hl] buffer (ld = 3*Hl, stride
// between heads d) and its scores are [B, nh, S, S]: one call per batch row covers all heads.
//
// Value types: A and B hold T = float, double, kx::bf16 or kx::fp16; C holds T, or float when T
// is 16-bit (a float weight gradient accumulated from 16-bit activations). alpha and beta are
// acc_t<T>. 16-bit inputs are multiplied and summed in fp32 and C is rounded once when stored
// (Megatron's bf16 GEMMs); products of two bf16 (or two fp16) are exact in fp32, so every backend
// equals a naive "fp32 sum of the 16-bit products", up to the order of the fp32 sums.
//
// Backends, picked at compile time for Exec:
//  * Exec on host memory with the BLAS TPL: Fortran BLAS (OpenBLAS) per batch entry. BLAS is
//    column-major, and a row-major C = op(A) op(B) is the column-major Cᵀ = op(B)ᵀ op(A)ᵀ, so
//    the operands and M/N are swapped. BLAS runs on the calling host thread: the instance is
//    fenced first so that earlier kernels on it have written A, B and C.
//    16-bit T: BLAS has no bf16/fp16 GEMM, so each batch entry's operands are widened to fp32
//    in a grow-only host buffer (host_gemm_buffer) and multiplied by sgemm; a 16-bit C is
//    widened too and rounded back once, a float C is used in place.
//  * Kokkos::Cuda with the cuBLAS TPL: one cublas{S,D}gemmStridedBatched on the stream of exec;
//    16-bit T: cublasGemmEx / cublasGemmStridedBatchedEx with CUDA_R_16BF / CUDA_R_16F inputs,
//    fp32 compute (CUBLAS_COMPUTE_32F) and a 16-bit or CUDA_R_32F C. (Kokkos Kernels does not
//    send 16-bit types to cuBLAS, so KokkosBlas::gemm is never called on them.)
//  * anything else: batched_gemm_kokkos, one thread per element of C, K summed in order (in
//    acc_t<T>).
// beta == 0 never reads C (BLAS semantics: C may hold NaN). C must not alias A or B.
//
// Limits: M, N, K, the leading dimensions and batch reach BLAS as 32-bit ints and are refused
// above 2^31 - 1 (std::length_error). The batch strides are not: cuBLAS takes them as long long
// and the host loop offsets in 64 bits, and attention's S*S score stride passes 2^31 at S = 46341
// while every dimension is still small.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <KokkosKernels_config.h>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/launch_count.hpp"
#include "kokkos_kernels/precision.hpp"

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

// The value types batched_gemm accepts (see the header comment).
template <class T, class TC>
constexpr void check_gemm_types() {
  static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value || kx::is_half_v<T>,
                "tptrain::kernels::batched_gemm: A and B hold float, double, bf16 or fp16");
  static_assert(std::is_same<TC, T>::value || (kx::is_half_v<T> && std::is_same<TC, float>::value),
                "tptrain::kernels::batched_gemm: C holds the type of A and B, or float for 16-bit "
                "A and B");
}

// Portable backend (no vendor BLAS for Exec): one thread per element of C, its K products
// summed in order in acc_t<T>, so results are deterministic. Slow; public so tests can check it
// on hosts that do have BLAS.
template <class Exec, class T, class TC>
void batched_gemm_kokkos(const Exec& exec, char transA, char transB, std::int64_t M,
                         std::int64_t N, std::int64_t K, const kx::acc_t<T> alpha, const T* A,
                         std::int64_t lda, std::int64_t strideA, const T* B, std::int64_t ldb,
                         std::int64_t strideB, const kx::acc_t<T> beta, TC* C, std::int64_t ldc,
                         std::int64_t strideC, std::int64_t batch) {
  check_gemm_types<T, TC>();
  using Acc = kx::acc_t<T>;
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
        Acc acc = 0;
        for (std::int64_t k = 0; k < K; ++k) acc += Acc(a[k * a_k]) * Acc(b[k * b_k]);
        TC& out = C[i * strideC + r * ldc + c];
        out = beta == Acc(0) ? alpha * acc : alpha * acc + beta * Acc(out);
      });
}

#if TPTRAIN_BATCHED_GEMM_HOST_BLAS
// fp32 copies of the operands of one 16-bit GEMM on the host. One grow-only buffer per host
// thread, never freed: it ends up holding M·K + K·N floats (+ M·N for a 16-bit C) of the
// largest single batch entry multiplied so far, so that a training loop allocates only in its
// first step. The linear layers dominate: for the MLP's fc (x [N, H], W [4H, H], y [N, 4H]) it
// is 4·(5·N·H + 4·H²) bytes, 135 MB at N = 8192 tokens and H = 768 (attention: one head's
// tile, far less). Host-only state, never touched inside a kernel.
inline float* host_gemm_buffer(const std::size_t floats) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

// Rows × cols of a row-major matrix at p (leading dimension ld) widened into dst (ld = cols).
template <class T>
void widen_to_float(const T* p, const std::int64_t ld, const std::int64_t rows,
                    const std::int64_t cols, float* dst) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dst[r * cols + c] = static_cast<float>(p[r * ld + c]);
}

// 16-bit A and B on the host: sgemm on their fp32 copies (exact: every 16-bit value is a float),
// so the result is the fp32 sum of the exact products; a 16-bit C is rounded once at the end.
template <class T, class TC>
void host_blas_gemm_16bit(char transA, char transB, std::int64_t M, std::int64_t N,
                          std::int64_t K, float alpha, const T* A, std::int64_t lda,
                          std::int64_t strideA, const T* B, std::int64_t ldb,
                          std::int64_t strideB, float beta, TC* C, std::int64_t ldc,
                          std::int64_t strideC, std::int64_t batch) {
  constexpr bool c_float = std::is_same<TC, float>::value;
  const std::int64_t rowsA = transA == 'N' ? M : K, colsA = transA == 'N' ? K : M;
  const std::int64_t rowsB = transB == 'N' ? K : N, colsB = transB == 'N' ? N : K;
  const std::int64_t sizeA = rowsA * colsA, sizeB = rowsB * colsB;
  const std::int64_t sizeC = c_float ? 0 : M * N;
  float* const a = host_gemm_buffer(static_cast<std::size_t>(sizeA + sizeB + sizeC));
  float* const b = a + sizeA;
  float* const c = b + sizeB;
  auto ld = [](std::int64_t cols) { return static_cast<int>(cols > 1 ? cols : 1); };
  for (std::int64_t i = 0; i < batch; ++i) {
    widen_to_float(A + i * strideA, lda, rowsA, colsA, a);
    widen_to_float(B + i * strideB, ldb, rowsB, colsB, b);
    TC* const Ci = C + i * strideC;
    if constexpr (c_float) {
      KokkosBlas::Impl::HostBlas<float>::gemm(transB, transA, static_cast<int>(N),
                                              static_cast<int>(M), static_cast<int>(K), alpha, b,
                                              ld(colsB), a, ld(colsA), beta, Ci,
                                              static_cast<int>(ldc));
    } else {
      if (beta != 0.0f) widen_to_float(Ci, ldc, M, N, c);  // beta == 0 never reads C
      KokkosBlas::Impl::HostBlas<float>::gemm(transB, transA, static_cast<int>(N),
                                              static_cast<int>(M), static_cast<int>(K), alpha, b,
                                              ld(colsB), a, ld(colsA), beta, c, ld(N));
      for (std::int64_t r = 0; r < M; ++r)
        for (std::int64_t j = 0; j < N; ++j) Ci[r * ldc + j] = TC(c[r * N + j]);
    }
  }
}
#endif

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

template <class T>
cudaDataType_t cuda_data_type() {
  if constexpr (std::is_same<T, kx::bf16>::value) return CUDA_R_16BF;
  else if constexpr (std::is_same<T, kx::fp16>::value) return CUDA_R_16F;
  else return CUDA_R_32F;
}

// 16-bit A and B (bit layouts of __nv_bfloat16 / __half, hence void*), fp32 compute; C 16-bit
// or fp32. Row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: operands swapped.
template <class T, class TC>
cublasStatus_t cublas_gemm_16bit(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                 int m, int n, int k, const float* alpha, const T* A, int lda,
                                 long long sA, const T* B, int ldb, long long sB,
                                 const float* beta, TC* C, int ldc, long long sC, int batch) {
  const cudaDataType_t ab = cuda_data_type<T>(), c = cuda_data_type<TC>();
  if (batch == 1)
    return cublasGemmEx(h, ta, tb, m, n, k, alpha, static_cast<const void*>(A), ab, lda,
                        static_cast<const void*>(B), ab, ldb, beta, static_cast<void*>(C), c, ldc,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, static_cast<const void*>(A), ab,
                                    lda, sA, static_cast<const void*>(B), ab, ldb, sB, beta,
                                    static_cast<void*>(C), c, ldc, sC, batch, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT);
}
#endif

}  // namespace detail

template <class Exec, class T, class TC>
void batched_gemm(const Exec& exec, char transA, char transB, std::int64_t M, std::int64_t N,
                  std::int64_t K, const kx::acc_t<T> alpha, const T* A, std::int64_t lda,
                  std::int64_t strideA, const T* B, std::int64_t ldb, std::int64_t strideB,
                  const kx::acc_t<T> beta, TC* C, std::int64_t ldc, std::int64_t strideC,
                  std::int64_t batch) {
  detail::check_gemm_types<T, TC>();
  detail::check_batched_gemm("batched_gemm", transA, transB, M, N, K, lda, strideA, ldb,
                             strideB, ldc, strideC, batch);
  if (M == 0 || N == 0 || batch == 0) return;
#if TPTRAIN_BATCHED_GEMM_CUBLAS
  if constexpr (std::is_same<Exec, Kokkos::Cuda>::value) {
    launch_count::record(launch_count::Kind::blas);
    auto& blas = KokkosBlas::Impl::CudaBlasSingleton::singleton();
    // The handle is shared with Kokkos Kernels: put its stream back afterwards.
    cudaStream_t previous = nullptr;
    if (cublasGetStream(blas.handle, &previous) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(blas.handle, exec.cuda_stream()) != CUBLAS_STATUS_SUCCESS) {
      throw std::runtime_error("tptrain::kernels::batched_gemm: cannot set the cuBLAS stream");
    }
    auto op = [](char t) { return t == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T; };
    cublasStatus_t status;
    if constexpr (kx::is_half_v<T>) {
      status = detail::cublas_gemm_16bit(
          blas.handle, op(transB), op(transA), static_cast<int>(N), static_cast<int>(M),
          static_cast<int>(K), &alpha, B, static_cast<int>(ldb), strideB, A,
          static_cast<int>(lda), strideA, &beta, C, static_cast<int>(ldc), strideC,
          static_cast<int>(batch));
    } else {
      status = detail::cublas_gemm_strided_batched(
          blas.handle, op(transB), op(transA), static_cast<int>(N), static_cast<int>(M),
          static_cast<int>(K), &alpha, B, static_cast<int>(ldb), strideB, A,
          static_cast<int>(lda), strideA, &beta, C, static_cast<int>(ldc), strideC,
          static_cast<int>(batch));
    }
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
    // One cuBLAS call on CUDA whatever the batch: the loop below is not a launch per entry.
    launch_count::record(launch_count::Kind::blas);
    kx::fence(exec, "tptrain::kernels::batched_gemm::host_blas");
    if constexpr (kx::is_half_v<T>) {
      detail::host_blas_gemm_16bit(transA, transB, M, N, K, alpha, A, lda, strideA, B, ldb,
                                   strideB, beta, C, ldc, strideC, batch);
    } else {
      for (std::int64_t i = 0; i < batch; ++i) {
        KokkosBlas::Impl::HostBlas<T>::gemm(
            transB, transA, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), alpha,
            B + i * strideB, static_cast<int>(ldb), A + i * strideA, static_cast<int>(lda), beta,
            C + i * strideC, static_cast<int>(ldc));
      }
    }
    return;
  }
#endif
  detail::batched_gemm_kokkos(exec, transA, transB, M, N, K, alpha, A, lda, strideA, B, ldb,
                              strideB, beta, C, ldc, strideC, batch);
}

}  // namespace tptrain::kernels
