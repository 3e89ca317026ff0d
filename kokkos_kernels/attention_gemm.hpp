// The GEMMs of causal attention (attention.hpp): every (batch, head) matrix of Q, K, V, the
// output and the S×S scores, addressed in place inside the activation and score buffers through
// data() and strides, multiplied through the one strided-batched GEMM seam (batched_gemm.hpp).
//
// Causality is used at tile granularity: rows are cut into tiles of causal_tile(S) rows, and a
// tile's GEMMs stop at the last key column it can see (about half the flops of the full S×S
// square at S = 1024). The masked entries the GEMMs do produce are overwritten by 0 in the
// softmax passes (causal_softmax.hpp), which write every entry of each row that a later GEMM
// reads.
//
// Precision: A and B share one storage type; C is that type, or float for 16-bit A and B (the
// GEMMs accumulate in fp32, batched_gemm.hpp). Matrices: the last index has stride 1; S, d and
// every leading dimension must fit in an int (BLAS).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kokkos_kernels/batched_gemm.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels::detail {

// Rows per causal tile. A tile of rows [r0, r1) multiplies only against keys [0, r1), so the
// GEMMs do Σ_t tile·(t+1)·tile ≈ (1 + tile/S)/2 of the square; smaller tiles waste less but run
// smaller, less efficient GEMMs. 64 and 128 measured alike on CPUs (docs/design.md, "Throughput
// measurement"); 128 keeps the GEMMs larger for GPUs.
inline std::int64_t causal_tile(std::int64_t S) { return S < 128 ? S : 128; }

// The [rows × cols] matrices of every (batch b, head h) in one buffer: element (r, c) of (b, h)
// at p[b*batch_stride + h*head_stride + r*ld + c].
template <class T>
struct HeadMatrices {
  T* p;
  std::int64_t ld, batch_stride, head_stride;
  HeadMatrices at(std::int64_t r, std::int64_t c) const {
    return HeadMatrices{p + r * ld + c, ld, batch_stride, head_stride};
  }
};

// Q, K or V of every (b, h) inside qkv [B*S, (nh + 2 nkv)·d] (or a gradient of that layout): the
// block starting at column `offset` (0, nh·d, (nh + nkv)·d); head h is a column slice of it.
template <class V>
HeadMatrices<typename V::value_type> qkv_block(const V& v, std::int64_t offset, std::int64_t S, std::int64_t d) {
  const std::int64_t ld = v.stride(0);
  return {v.data() + offset, ld, S * ld, d};
}

// Grouped-query attention's member j of each group of g query heads (heads kv·g + j for every
// key/value head kv): the matrices of a per-head operand (Q, the scores, the output) as nkv heads,
// so that a GEMM over the nkv key/value heads pairs member j of each group with its K and V.
template <class T>
HeadMatrices<T> group_member(const HeadMatrices<T>& m, std::int64_t j, std::int64_t g) {
  return {m.p + j * m.head_stride, m.ld, m.batch_stride, m.head_stride * g};
}

// Heads of out / dout [B*S, Hl].
template <class V>
HeadMatrices<typename V::value_type> head_columns(const V& v, std::int64_t S, std::int64_t d) {
  const std::int64_t ld = v.stride(0);
  return {v.data(), ld, S * ld, d};
}

// The [rows × cols] matrices of every (b, h) in a rank-4 [B, nh, rows, cols] view: the S×S
// scores, or the backward's row tiles.
template <class V>
HeadMatrices<typename V::value_type> score_matrices(const V& v) {
  return {v.data(), static_cast<std::int64_t>(v.stride(2)),
          static_cast<std::int64_t>(v.stride(0)), static_cast<std::int64_t>(v.stride(1))};
}

// C_bh = op(A_bh) op(B_bh) + beta C_bh for every (b, h) (beta = 0 never reads C). One strided
// batch covers one index only (heads are d apart in qkv, batches S*ld), so loop over the shorter
// and batch over the longer: few, large calls (one launch per call on GPUs).
template <class Exec, class T, class TA, class TB>
void per_head_gemm(const Exec& exec, char transA, char transB, std::int64_t M, std::int64_t N,
                   std::int64_t K, const HeadMatrices<TA>& A, const HeadMatrices<TB>& Bm,
                   const HeadMatrices<T>& C, std::int64_t batches, std::int64_t heads,
                   const kx::acc_t<T> beta = 0) {
  using AB = std::remove_const_t<TA>;  // A and B share it; C is AB, or float for 16-bit AB
  if (heads >= batches) {
    for (std::int64_t b = 0; b < batches; ++b)
      batched_gemm<Exec, AB>(exec, transA, transB, M, N, K, 1, A.p + b * A.batch_stride, A.ld,
                            A.head_stride, Bm.p + b * Bm.batch_stride, Bm.ld, Bm.head_stride,
                            beta, C.p + b * C.batch_stride, C.ld, C.head_stride, heads);
  } else {
    for (std::int64_t h = 0; h < heads; ++h)
      batched_gemm<Exec, AB>(exec, transA, transB, M, N, K, 1, A.p + h * A.head_stride, A.ld,
                            A.batch_stride, Bm.p + h * Bm.head_stride, Bm.ld, Bm.batch_stride,
                            beta, C.p + h * C.head_stride, C.ld, C.batch_stride, batches);
  }
}

// scores = Q Kᵀ (or dP = dO Vᵀ): row tile [r0, r1) against keys [0, r1).
template <class Exec, class T, class TA, class TB>
void causal_scores_gemm(const Exec& exec, const HeadMatrices<TA>& A, const HeadMatrices<TB>& Bm,
                        const HeadMatrices<T>& C, std::int64_t S, std::int64_t d,
                        std::int64_t batches, std::int64_t heads) {
  const std::int64_t tile = causal_tile(S);
  for (std::int64_t r0 = 0; r0 < S; r0 += tile) {
    const std::int64_t r1 = kx::min(S, r0 + tile);
    per_head_gemm(exec, 'N', 'T', r1 - r0, r1, d, A.at(r0, 0), Bm, C.at(r0, 0), batches, heads);
  }
}

// O = P V (or dQ = dS K): row tile [r0, r1) sums over keys [0, r1), where P is lower triangular.
template <class Exec, class T, class TA, class TB>
void causal_rows_gemm(const Exec& exec, const HeadMatrices<TA>& P, const HeadMatrices<TB>& V,
                      const HeadMatrices<T>& O, std::int64_t S, std::int64_t d,
                      std::int64_t batches, std::int64_t heads) {
  const std::int64_t tile = causal_tile(S);
  for (std::int64_t r0 = 0; r0 < S; r0 += tile) {
    const std::int64_t r1 = kx::min(S, r0 + tile);
    per_head_gemm(exec, 'N', 'N', r1 - r0, d, r1, P.at(r0, 0), V, O.at(r0, 0), batches, heads);
  }
}

// dV (+)= Pᵀ dO (or dK = dSᵀ Q): key tile [c0, c1) sums over the queries [c0, S) that see it.
template <class Exec, class T, class TA, class TB>
void causal_cols_gemm(const Exec& exec, const HeadMatrices<TA>& P, const HeadMatrices<TB>& X,
                      const HeadMatrices<T>& Y, std::int64_t S, std::int64_t d,
                      std::int64_t batches, std::int64_t heads, const kx::acc_t<T> beta = 0) {
  const std::int64_t tile = causal_tile(S);
  for (std::int64_t c0 = 0; c0 < S; c0 += tile) {
    const std::int64_t c1 = kx::min(S, c0 + tile);
    per_head_gemm(exec, 'T', 'N', c1 - c0, d, S - c0, P.at(c0, c0), X.at(c0, 0), Y.at(c0, 0),
                  batches, heads, beta);
  }
}

}  // namespace tptrain::kernels::detail
