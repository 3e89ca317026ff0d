// Pointer-array batched GEMM, row-major: for i in [0, batch)
//   C[i] = alpha · op(A[i]) · op(B[i]) + beta · C[i]
// where A, B and C are arrays of `batch` matrix pointers in memory Exec can read (on CUDA:
// device memory, filled by a kernel). Shapes, leading dimensions, ops and value types as in
// batched_gemm.hpp (which it shares its checks and 16-bit rules with); every entry has the same
// M, N, K and leading dimensions, the matrices may lie anywhere.
//
// Why pointers rather than one more stride: batched attention (attention_batched.hpp) multiplies
// every (batch, head) pair at once, and in qkv [B*S, 3*Hl] the pair's matrix sits at
// b*S*ld + h*d, which no single stride reaches. The alternative, copying Q, K and V into a
// [B, nh, S, d] layout, costs a kernel per operand and a buffer the size of qkv; a pointer table
// costs 3·batch pointers, filled with the other tables of a pass by one small kernel.
//
// Backends: CUDA with cuBLAS: one cublas{S,D}gemmBatched / cublasGemmBatchedEx (16-bit inputs,
// fp32 compute) on exec's stream. Host with the BLAS TPL: the instance is fenced, then one BLAS
// GEMM per entry (the pointer table is host memory there). Otherwise one Kokkos kernel, one
// thread per element of C. Each call is one launch for the launch count (launch_count.hpp): a
// BLAS call on the vendor backends, the kernel itself on the portable one.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kokkos_kernels/batched_gemm.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/launch_count.hpp"

namespace tptrain::kernels {

namespace detail {

template <class Exec, class T, class TC>
void pointer_batched_gemm_kokkos(const Exec& exec, char transA, char transB, std::int64_t M,
                                 std::int64_t N, std::int64_t K, const kx::acc_t<T> alpha,
                                 T* const* A, std::int64_t lda, T* const* B, std::int64_t ldb,
                                 const kx::acc_t<T> beta, TC* const* C, std::int64_t ldc,
                                 std::int64_t batch) {
  using Acc = kx::acc_t<T>;
  const std::int64_t a_k = transA == 'N' ? 1 : lda, a_r = transA == 'N' ? lda : 1;
  const std::int64_t b_k = transB == 'N' ? ldb : 1, b_c = transB == 'N' ? 1 : ldb;
  Kokkos::parallel_for(
      "tptrain::kernels::pointer_batched_gemm", range2d(exec, batch * M, N),
      KOKKOS_LAMBDA(const std::int64_t ir, const std::int64_t c) {
        const std::int64_t i = ir / M, r = ir % M;
        const T* a = A[i] + r * a_r;
        const T* b = B[i] + c * b_c;
        Acc acc = 0;
        for (std::int64_t k = 0; k < K; ++k) acc += Acc(a[k * a_k]) * Acc(b[k * b_k]);
        TC& out = C[i][r * ldc + c];
        out = beta == Acc(0) ? alpha * acc : alpha * acc + beta * Acc(out);
      });
}

#if TPTRAIN_BATCHED_GEMM_CUBLAS
inline cublasStatus_t cublas_gemm_batched(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const float* alpha, float* const* A, int lda,
                                          float* const* B, int ldb, const float* beta,
                                          float* const* C, int ldc, int batch) {
  return cublasSgemmBatched(h, ta, tb, m, n, k, alpha, const_cast<const float**>(A), lda,
                            const_cast<const float**>(B), ldb, beta, const_cast<float**>(C), ldc,
                            batch);
}
inline cublasStatus_t cublas_gemm_batched(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const double* alpha, double* const* A, int lda,
                                          double* const* B, int ldb, const double* beta,
                                          double* const* C, int ldc, int batch) {
  return cublasDgemmBatched(h, ta, tb, m, n, k, alpha, const_cast<const double**>(A), lda,
                            const_cast<const double**>(B), ldb, beta, const_cast<double**>(C),
                            ldc, batch);
}
#endif

}  // namespace detail

template <class Exec, class T, class TC>
void pointer_batched_gemm(const Exec& exec, char transA, char transB, std::int64_t M,
                          std::int64_t N, std::int64_t K, const kx::acc_t<T> alpha, T* const* A,
                          std::int64_t lda, T* const* B, std::int64_t ldb,
                          const kx::acc_t<T> beta, TC* const* C, std::int64_t ldc,
                          std::int64_t batch) {
  detail::check_gemm_types<T, TC>();
  detail::check_batched_gemm("pointer_batched_gemm", transA, transB, M, N, K, lda, 0, ldb, 0,
                             ldc, 0, batch);
  if (M == 0 || N == 0 || batch == 0) return;
#if TPTRAIN_BATCHED_GEMM_CUBLAS
  if constexpr (std::is_same<Exec, Kokkos::Cuda>::value) {
    launch_count::record(launch_count::Kind::blas);
    auto& blas = KokkosBlas::Impl::CudaBlasSingleton::singleton();
    cudaStream_t previous = nullptr;  // the handle is shared with Kokkos Kernels
    if (cublasGetStream(blas.handle, &previous) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(blas.handle, exec.cuda_stream()) != CUBLAS_STATUS_SUCCESS) {
      throw std::runtime_error("tptrain::kernels::pointer_batched_gemm: cannot set the cuBLAS stream");
    }
    auto op = [](char t) { return t == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T; };
    cublasStatus_t status;
    // Row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: operands swapped.
    if constexpr (kx::is_half_v<T>) {
      status = cublasGemmBatchedEx(
          blas.handle, op(transB), op(transA), static_cast<int>(N), static_cast<int>(M),
          static_cast<int>(K), &alpha, reinterpret_cast<const void* const*>(B),
          detail::cuda_data_type<T>(), static_cast<int>(ldb),
          reinterpret_cast<const void* const*>(A), detail::cuda_data_type<T>(),
          static_cast<int>(lda), &beta, reinterpret_cast<void* const*>(C),
          detail::cuda_data_type<TC>(), static_cast<int>(ldc), static_cast<int>(batch),
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    } else {
      status = detail::cublas_gemm_batched(blas.handle, op(transB), op(transA),
                                           static_cast<int>(N), static_cast<int>(M),
                                           static_cast<int>(K), &alpha, B,
                                           static_cast<int>(ldb), A, static_cast<int>(lda),
                                           &beta, C, static_cast<int>(ldc),
                                           static_cast<int>(batch));
    }
    cublasSetStream(blas.handle, previous);
    if (status != CUBLAS_STATUS_SUCCESS) {
      throw std::runtime_error("tptrain::kernels::pointer_batched_gemm: cuBLAS status " +
                               std::to_string(static_cast<int>(status)));
    }
    return;
  }
#endif
#if TPTRAIN_BATCHED_GEMM_HOST_BLAS
  if constexpr (std::is_same<typename Exec::memory_space, Kokkos::HostSpace>::value) {
    launch_count::record(launch_count::Kind::blas);  // one cuBLAS call on CUDA
    kx::fence(exec, "tptrain::kernels::pointer_batched_gemm::host_blas");
    for (std::int64_t i = 0; i < batch; ++i) {
      if constexpr (kx::is_half_v<T>) {
        detail::host_blas_gemm_16bit(transA, transB, M, N, K, alpha, A[i], lda, 0, B[i], ldb, 0,
                                     beta, C[i], ldc, 0, 1);
      } else {
        KokkosBlas::Impl::HostBlas<T>::gemm(transB, transA, static_cast<int>(N),
                                            static_cast<int>(M), static_cast<int>(K), alpha, B[i],
                                            static_cast<int>(ldb), A[i], static_cast<int>(lda),
                                            beta, C[i], static_cast<int>(ldc));
      }
    }
    return;
  }
#endif
  detail::pointer_batched_gemm_kokkos(exec, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta,
                                      C, ldc, batch);
}

}  // namespace tptrain::kernels
