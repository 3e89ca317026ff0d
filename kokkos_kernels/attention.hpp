// Causal multi-head self-attention core for the LOCAL heads of a tensor-parallel rank, as
// strided-batched GEMMs (batched_gemm.hpp) around fused row-wise softmax passes.
//
// qkv [B*S, 3*Hl], Hl = nh_local*d, columns [Q of local heads | K of local heads | V of local
// heads]; local head h occupies columns h*d .. h*d+d-1 inside each block. Row t = b*S + s.
// Per (b, h), with scale = 1/sqrt(d):
//   S = Q Kᵀ                                       (GEMM into the probs workspace)
//   P_ij = exp(scale S_ij - lse_i) for j <= i, 0 otherwise,  lse_i = log Σ_{j<=i} exp(scale S_ij)
//   O = P V                                        (GEMM into out)
// Backward (the probabilities are recomputed from lse: callers share one probs buffer across
// layers, so nothing of size S² survives between forward and backward):
//   S = Q Kᵀ, P from lse;  dV = Pᵀ dO;  then per query row tile [r0, r1), into a row-tile
//   buffer [B, nh, tile, S] (the only other score-sized memory, tile = causal_tile(S) rows):
//     dP = dO[r0, r1) V[0, r1)ᵀ
//     dS_ij = scale P_ij (dP_ij - Σ_l P_il dP_il)  (softmax Jacobian, masked 0)
//     dQ[r0, r1) = dS K[0, r1);  dK[0, r1) += dSᵀ Q[r0, r1)
//   The tiles run last to first, so the first one (which covers every key row) initialises dK
//   with beta = 0 and the others accumulate with beta = 1: a fixed order, deterministic.
// Causality is used at tile granularity: rows are cut into tiles of causal_tile(S) rows, and a
// tile's GEMMs stop at the last key column it can see (about half the flops of the full S×S
// square at S = 1024). The masked entries the GEMMs do produce are overwritten by 0 in the
// softmax passes, which write every entry of each row that a later GEMM reads (the backward's
// tile rows up to column r1).
//
// The softmax passes run one Kokkos team per row (b, h, i) with team reductions: no atomics, so
// results are bitwise reproducible for a fixed team size and a fixed GEMM backend. The passes
// that read a row twice or more keep it in team scratch when it fits (detail::ScratchRow), with
// the same arithmetic as the global-memory path.
//
// Precision: qkv, out, the scores / probabilities and their gradients share one storage type T
// (float, double, kx::bf16 or kx::fp16: Megatron keeps the S×S scores in the compute type); the
// GEMMs accumulate in fp32 for 16-bit T (batched_gemm.hpp), and the softmax passes compute every
// max, exp and sum in acc_t<T> and round each output once. lse holds acc_t<T> (float for 16-bit
// T): the backward rebuilds P from it, and a rounded lse would shift every recomputed P. The dK
// of a backward with several query row tiles is accumulated over the tiles (beta = 1): in an fp32
// workspace when the caller gives one (dk_sum; the model does), else in dqkv itself, which for
// 16-bit T rounds it once per tile (ceil(S / 128) times).
// Views: qkv/out/dout/dqkv rank 2, probs rank 4 ([B, nh_local, S, S]) and the backward's
// dprobs_tile rank 4 ([B, nh_local, >= tile, S]), any layout whose last index has stride 1
// (LayoutRight views, row-range subviews): the GEMMs address them through data() and strides. lse is rank 1, [B*nh_local*S], entry (b*nh_local + h)*S + i.
// B*nh_local*S, the number of teams, must fit in a league (detail::league_size, std::length_error
// otherwise); S, d and every leading dimension must fit in an int (BLAS); indices are 64-bit.
#pragma once

#include <string>
#include <type_traits>

#include "kokkos_kernels/batched_gemm.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "kokkos_kernels/views.hpp"

namespace tptrain::kernels {

namespace detail {

// Query (or key) row r of the league, r = (b*nh + h)*S + i: batch b, local head h, position i.
// The league rank is an int, but everything derived from it is 64-bit: score offsets grow as
// S*S (2^32 at S = 65536) and token rows as B*S.
struct AttentionRow {
  std::int64_t b, h, i;
};
KOKKOS_INLINE_FUNCTION AttentionRow attention_row(const std::int64_t r, const std::int64_t S,
                                                  const std::int64_t nh) {
  return AttentionRow{r / (S * nh), (r / S) % nh, r % S};
}

// Row of token (b, s) in the [B*S, ...] activations.
KOKKOS_INLINE_FUNCTION std::int64_t token_row(const std::int64_t b, const std::int64_t S,
                                              const std::int64_t s) {
  return b * S + s;
}

// Rows per causal tile. A tile of rows [r0, r1) multiplies only against keys [0, r1), so the
// GEMMs do Σ_t tile·(t+1)·tile ≈ (1 + tile/S)/2 of the square; smaller tiles waste less but run
// smaller, less efficient GEMMs. OpenBLAS, one thread, forward+backward: tiles of 64 and 128
// within noise of each other, 25% faster than the full square at S = 1024 (nh = 12, d = 64)
// and 20% at S = 256; 128 keeps the GEMMs larger for GPUs.
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

// Q, K or V (block 0, 1, 2) of every (b, h) inside qkv [B*S, 3*Hl]: head h is a column slice.
template <class V>
HeadMatrices<typename V::value_type> qkv_block(const V& v, std::int64_t block, std::int64_t S,
                                               std::int64_t d, std::int64_t hl) {
  const std::int64_t ld = v.stride(0);
  return {v.data() + block * hl, ld, S * ld, d};
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

// dV = Pᵀ dO (or dK = dSᵀ Q): key tile [c0, c1) sums over the queries [c0, S) that see it.
template <class Exec, class T, class TA, class TB>
void causal_cols_gemm(const Exec& exec, const HeadMatrices<TA>& P, const HeadMatrices<TB>& X,
                      const HeadMatrices<T>& Y, std::int64_t S, std::int64_t d,
                      std::int64_t batches, std::int64_t heads) {
  const std::int64_t tile = causal_tile(S);
  for (std::int64_t c0 = 0; c0 < S; c0 += tile) {
    const std::int64_t c1 = kx::min(S, c0 + tile);
    per_head_gemm(exec, 'T', 'N', c1 - c0, d, S - c0, P.at(c0, c0), X.at(c0, 0), Y.at(c0, 0),
                  batches, heads);
  }
}

template <class V>
void require_unit_last_stride(const V& v, const char* kernel, const char* what) {
  constexpr int rank = static_cast<int>(V::rank);
  require(v.stride(rank - 1) == 1 || v.extent(rank - 1) <= 1, kernel, what);
}

template <class PV>
void check_scores(const PV& probs, const char* kernel) {
  detail::require(probs.extent(2) == probs.extent(3), kernel, "scores must be [B, nh, S, S]");
}

}  // namespace detail

// From scores [B, nh, S, S] = Q Kᵀ (unscaled) into probs of the same shape (the same view for
// in place): P_ij = softmax_{j<=i}(scale S_ij), masked entries 0; lse [B*nh*S] gets the log of
// each row's normaliser, max + log Σ exp(x - max) over the scaled scores x = scale S_ij (so that
// P_ij = exp(x_ij - lse_i)). Out of place, the scores are left as they are (recompute = none
// keeps them for the backward); the arithmetic is the same either way.
template <class Exec, class SV, class PV, class LV>
void causal_softmax_forward(const Exec& exec, const SV& scores, const PV& probs, const LV& lse,
                            const kx::acc_t<typename PV::non_const_value_type> scale) {
  detail::check_view<Exec, SV, 4>();
  detail::check_view<Exec, PV, 4>();
  detail::check_view<Exec, LV, 1>();
  detail::check_writable<PV>();
  detail::check_writable<LV>();
  detail::check_scores(scores, "causal_softmax_forward");
  static_assert(std::is_same<typename SV::non_const_value_type, typename PV::non_const_value_type>::value,
                "tptrain::kernels::causal_softmax_forward: scores and probs hold one value type");
  for (int d = 0; d < 4; ++d)
    detail::require(probs.extent(d) == scores.extent(d), "causal_softmax_forward",
                    "probs must have the shape of scores");
  const std::int64_t nh = scores.extent(1), S = scores.extent(2);
  const std::int64_t rows = static_cast<std::int64_t>(scores.extent(0)) * nh * S;
  detail::require(lse.extent(0) == static_cast<std::size_t>(rows), "causal_softmax_forward",
                  "lse must be [B*nh*S]");
  using T = kx::acc_t<typename PV::non_const_value_type>;
  using member = typename detail::Teams<Exec>::member_type;
  using Row = detail::ScratchRow<Exec, T>;
  // The row's raw scores, then its exps, stay in team scratch when they fit (S = 2048: 8 KiB in
  // float): global memory sees one read of the row's causal part and one write of the row,
  // instead of three reads and two writes. The scratch row is in acc_t (float for 16-bit
  // scores), so that the exps are not rounded before they are normalised.
  const std::size_t row_bytes = detail::scratch_row_bytes<Exec, T>(S);
  // 16-bit scores without the scratch row: the exps are not written to scores (that would round
  // them twice) but computed again in the normalising pass, which rounds once.
  constexpr bool recompute_exp = kx::is_half_v<typename PV::non_const_value_type>;
  // Compile-time false on host backends: their loops carry no scratch branch at all.
  constexpr bool can_cache = detail::scratch_rows<Exec>();
  const auto row_teams = detail::row_teams(exec, rows, row_bytes, "causal_softmax_forward");
  const bool fits = row_teams.cached;
  Kokkos::parallel_for(
      "tptrain::kernels::causal_softmax_forward", row_teams.policy, KOKKOS_LAMBDA(const member& team) {
        const bool cached = can_cache && fits;
        const std::int64_t r = team.league_rank();
        const detail::AttentionRow row = detail::attention_row(r, S, nh);
        const std::int64_t b = row.b, h = row.h, i = row.i;
        const Row buf = cached ? Row(team.team_scratch(0), S) : Row();
        // scale > 0, and rounding is monotone: max_j fl(scale·s_j) = fl(scale·max_j s_j).
        T smax = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, i + 1),
            [&](const std::int64_t j, T& acc) {
              const T s = scores(b, h, i, j);
              if (cached) buf(j) = s;
              acc = kx::max(acc, s);
            },
            Kokkos::Max<T>(smax));
        team.team_barrier();  // every read of the raw scores is done before they are replaced (in place)
        const T xmax = scale * smax;
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, S),
            [&](const std::int64_t j, T& acc) {
              const T e =
                  j <= i ? kx::exp(scale * (cached ? buf(j) : T(scores(b, h, i, j))) - xmax)
                         : T(0);
              if (!cached) {
                if (!recompute_exp) probs(b, h, i, j) = e;
              } else if (j <= i) {
                buf(j) = e;
              }
              acc += e;
            },
            sum);
        team.team_barrier();  // the ranges differ: another thread may have written exp
        const T inv = T(1) / sum;  // sum >= 1: the max entry contributes exp(0)
        if (cached) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, S), [&](const std::int64_t j) {
            probs(b, h, i, j) = j <= i ? buf(j) * inv : T(0);
          });
        } else if (recompute_exp) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, S), [&](const std::int64_t j) {
            T p = 0;  // masked entries may hold anything: not read
            if (j <= i) p = kx::exp(scale * T(scores(b, h, i, j)) - xmax) * inv;
            probs(b, h, i, j) = p;
          });
        } else {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, i + 1),
                               [&](const std::int64_t j) { probs(b, h, i, j) *= inv; });
        }
        Kokkos::single(Kokkos::PerTeam(team), [&]() { lse(r) = xmax + kx::log(sum); });
      });
}

// In place on scores: they become the probabilities.
template <class Exec, class PV, class LV>
void causal_softmax_forward(const Exec& exec, const PV& scores, const LV& lse,
                            const kx::acc_t<typename PV::non_const_value_type> scale) {
  causal_softmax_forward(exec, scores, scores, lse, scale);
}

// In place on scores [B, nh, S, S] = Q Kᵀ (unscaled), with lse from causal_softmax_forward:
// P_ij = exp(scale S_ij - lse_i) for j <= i, 0 otherwise (the forward probabilities, to
// rounding).
template <class Exec, class PV, class LV>
void causal_softmax_recompute(const Exec& exec, const PV& scores, const LV& lse,
                              const kx::acc_t<typename PV::non_const_value_type> scale) {
  detail::check_view<Exec, PV, 4>();
  detail::check_view<Exec, LV, 1>();
  detail::check_writable<PV>();
  detail::check_scores(scores, "causal_softmax_recompute");
  const std::int64_t nh = scores.extent(1), S = scores.extent(2);
  const std::int64_t rows = static_cast<std::int64_t>(scores.extent(0)) * nh * S;
  detail::require(lse.extent(0) == static_cast<std::size_t>(rows), "causal_softmax_recompute",
                  "lse must be [B*nh*S]");
  using T = kx::acc_t<typename PV::non_const_value_type>;
  using member = typename detail::Teams<Exec>::member_type;
  const auto policy = detail::teams(exec, rows, "causal_softmax_recompute");
  Kokkos::parallel_for(
      "tptrain::kernels::causal_softmax_recompute", policy, KOKKOS_LAMBDA(const member& team) {
        const std::int64_t r = team.league_rank();
        const detail::AttentionRow row = detail::attention_row(r, S, nh);
        const std::int64_t b = row.b, h = row.h, i = row.i;
        const T l = lse(r);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, S), [&](const std::int64_t j) {
          scores(b, h, i, j) = j <= i ? kx::exp(scale * T(scores(b, h, i, j)) - l) : T(0);
        });
      });
}

// Softmax backward of query rows [r0, r1), in place on a row-tile buffer dprobs_tile
// [B, nh, >= r1 - r0, S] whose row i - r0 holds query i: dP in, dS out, with
//   dS_ij = scale · P_ij (dP_ij - Σ_{l<=i} P_il dP_il)   for j <= i, 0 for i < j < r1,
// the gradient wrt the unscaled scores Q Kᵀ (scale folded in, so dQ = dS K and dK = dSᵀ Q).
// P comes from probs [B, nh, S, S] (rows r0..r1-1). Only the columns j < r1 of each tile row
// are read (j <= i) or written; columns r1.. and tile rows r1 - r0.. are left alone.
template <class Exec, class PV, class DPV>
void causal_softmax_backward_rows(const Exec& exec, const PV& probs, const DPV& dprobs_tile,
                                  const std::int64_t r0, const std::int64_t r1,
                                  const kx::acc_t<typename DPV::non_const_value_type> scale) {
  detail::check_view<Exec, PV, 4>();
  detail::check_view<Exec, DPV, 4>();
  detail::check_writable<DPV>();
  const char* kernel = "causal_softmax_backward";
  detail::check_scores(probs, kernel);
  const std::int64_t nh = probs.extent(1), S = probs.extent(2);
  detail::require(0 <= r0 && r0 <= r1 && r1 <= S, kernel, "need 0 <= r0 <= r1 <= S");
  const std::int64_t n = r1 - r0;
  detail::require(dprobs_tile.extent(0) == probs.extent(0) &&
                      dprobs_tile.extent(1) == probs.extent(1) &&
                      dprobs_tile.extent(2) >= static_cast<std::size_t>(n) &&
                      dprobs_tile.extent(3) == probs.extent(3),
                  kernel, "dprobs must be [B, nh, >= r1 - r0, S] for probs [B, nh, S, S]");
  const std::int64_t rows = static_cast<std::int64_t>(probs.extent(0)) * nh * n;
  if (rows == 0) return;
  using DT = typename DPV::non_const_value_type;
  using PT = typename PV::non_const_value_type;
  using T = kx::acc_t<DT>;
  using member = typename detail::Teams<Exec>::member_type;
  // P and dP of the row (j <= i < r1) stay in team scratch between the dot product and the
  // output pass when they fit: each is read from global memory once instead of twice. (The
  // scratch copies keep the storage types: they hold stored values, nothing is rounded there.)
  const std::size_t bytes =
      detail::scratch_row_bytes<Exec, PT>(r1) + detail::scratch_row_bytes<Exec, DT>(r1);
  // Compile-time false on host backends: their loops carry no scratch branch at all.
  constexpr bool can_cache = detail::scratch_rows<Exec>();
  const auto row_teams = detail::row_teams(exec, rows, bytes, kernel);
  const bool fits = row_teams.cached;
  Kokkos::parallel_for(
      "tptrain::kernels::causal_softmax_backward", row_teams.policy, KOKKOS_LAMBDA(const member& team) {
        const bool cached = can_cache && fits;
        // League rank (b*nh + h)*n + t: tile row t is query i = r0 + t.
        const detail::AttentionRow row = detail::attention_row(team.league_rank(), n, nh);
        const std::int64_t b = row.b, h = row.h, t = row.i, i = r0 + t;
        const detail::ScratchRow<Exec, PT> pbuf =
            cached ? detail::ScratchRow<Exec, PT>(team.team_scratch(0), r1)
                   : detail::ScratchRow<Exec, PT>();
        const detail::ScratchRow<Exec, DT> dpbuf =
            cached ? detail::ScratchRow<Exec, DT>(team.team_scratch(0), r1)
                   : detail::ScratchRow<Exec, DT>();
        T dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, i + 1),
            [&](const std::int64_t j, T& acc) {
              const PT p = probs(b, h, i, j);
              const DT dp = dprobs_tile(b, h, t, j);
              if (cached) {
                pbuf(j) = p;
                dpbuf(j) = dp;
              }
              acc += p * dp;  // (16-bit: a float product)
            },
            dot);
        team.team_barrier();  // every read of dP is done before it is replaced
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, r1), [&](const std::int64_t j) {
          if (j > i) {
            dprobs_tile(b, h, t, j) = T(0);
          } else if (cached) {
            dprobs_tile(b, h, t, j) = scale * pbuf(j) * (dpbuf(j) - dot);
          } else {
            dprobs_tile(b, h, t, j) = scale * probs(b, h, i, j) * (dprobs_tile(b, h, t, j) - dot);
          }
        });
      });
}

// Softmax backward of every row, in place on dprobs [B, nh, S, S] (dP in, dS out, as above;
// every entry is written, the masked ones 0).
template <class Exec, class PV, class DPV>
void causal_softmax_backward(const Exec& exec, const PV& probs, const DPV& dprobs,
                             const kx::acc_t<typename DPV::non_const_value_type> scale) {
  detail::check_view<Exec, PV, 4>();
  detail::check_view<Exec, DPV, 4>();
  detail::check_scores(probs, "causal_softmax_backward");
  for (int r = 0; r < 4; ++r)
    detail::require(dprobs.extent(r) == probs.extent(r), "causal_softmax_backward",
                    "dprobs must have the shape of probs");
  causal_softmax_backward_rows(exec, probs, dprobs, 0, static_cast<std::int64_t>(probs.extent(2)),
                               scale);
}

// Rows of the backward's row-tile buffer dprobs_tile [B, nh_local, tile, S] for sequence length
// S: the causal tile, min(S, 128).
inline std::int64_t attention_backward_tile_rows(std::int64_t S) { return detail::causal_tile(S); }

// Forward. probs is a workspace (its contents afterwards are P, but attention_backward does not
// need them); lse is the only state the backward needs besides qkv.
// kept_scores (may be empty): a [B, nh_local, S, S] buffer that receives the raw scores Q Kᵀ and
// keeps them for the backward (activation recomputation "none"), which then skips its Q Kᵀ GEMM
// (attention_backward_tiled with scores_kept): the S² memory Korthikanti et al.'s selective
// recomputation saves, traded for one GEMM of 2·B·nh·S²·d flops. The backward rebuilds P from the
// same scores either way, so the gradients are bitwise those of the recomputing backward.
template <class Exec, class QKV, class OV, class PV, class LV, class KV>
void attention_forward(const Exec& exec,
                       const QKV& qkv,    // [B*S, 3*Hl]
                       const OV& out,     // [B*S, Hl] out (overwritten)
                       const PV& probs,   // [B, nh_local, S, S] workspace
                       const LV& lse,     // [B*nh_local*S] out
                       const std::int64_t B, const std::int64_t S, const std::int64_t nh_local,
                       const std::int64_t d, const KV& kept_scores) {
  detail::check_view<Exec, QKV, 2>();
  detail::check_view<Exec, OV, 2>();
  detail::check_view<Exec, PV, 4>();
  detail::check_view<Exec, LV, 1>();
  detail::check_writable<OV>();
  detail::check_writable<PV>();
  detail::check_writable<LV>();
  using T = typename OV::non_const_value_type;
  using A = kx::acc_t<T>;
  static_assert(std::is_same<typename QKV::non_const_value_type, T>::value &&
                    std::is_same<typename PV::non_const_value_type, T>::value,
                "tptrain::kernels::attention_forward: qkv, out and probs hold one value type");
  static_assert(std::is_same<typename LV::non_const_value_type, A>::value,
                "tptrain::kernels::attention_forward: lse holds acc_t of that type");
  const char* kernel = "attention_forward";
  detail::require(B >= 0 && S >= 0 && nh_local > 0 && d > 0, kernel,
                  "need B, S >= 0 and nh_local, d > 0");
  const std::int64_t nh = nh_local, hl = nh * d;
  detail::require(qkv.extent(0) == static_cast<std::size_t>(B * S) &&
                      qkv.extent(1) == static_cast<std::size_t>(3 * hl) &&
                      out.extent(0) == static_cast<std::size_t>(B * S) &&
                      out.extent(1) == static_cast<std::size_t>(hl),
                  kernel, "shapes must be qkv[B*S, 3*nh_local*d], out[B*S, nh_local*d]");
  detail::require(probs.extent(0) == static_cast<std::size_t>(B) &&
                      probs.extent(1) == static_cast<std::size_t>(nh) &&
                      probs.extent(2) == static_cast<std::size_t>(S) &&
                      probs.extent(3) == static_cast<std::size_t>(S),
                  kernel, "probs must be [B, nh_local, S, S]");
  detail::require(lse.extent(0) == static_cast<std::size_t>(B * nh * S), kernel,
                  "lse must be [B*nh_local*S]");
  detail::require_unit_last_stride(qkv, kernel, "qkv rows must be contiguous");
  detail::require_unit_last_stride(out, kernel, "out rows must be contiguous");
  detail::require_unit_last_stride(probs, kernel, "probs rows must be contiguous");
  const bool keep = kept_scores.size() > 0;
  if (keep) {
    detail::check_view<Exec, KV, 4>();
    static_assert(std::is_same<typename KV::value_type, T>::value,
                  "tptrain::kernels::attention_forward: kept_scores holds the value type");
    for (int r = 0; r < 4; ++r)
      detail::require(kept_scores.extent(r) == probs.extent(r) && kept_scores.stride(r) == probs.stride(r), kernel,
                      "kept_scores must have the shape and strides of probs");
  }
  // Every size check before the first launch: a refused shape leaves the outputs untouched.
  detail::league_size<Exec>(B * nh * S, kernel);
  detail::require_blas_int(qkv.stride(0), kernel, "qkv.stride(0)");
  detail::require_blas_int(out.stride(0), kernel, "out.stride(0)");
  detail::require_blas_int(probs.stride(2), kernel, "probs.stride(2)");
  detail::require_blas_int(S, kernel, "S");
  if (B == 0 || S == 0) return;
  const A scale = A(1) / kx::sqrt(static_cast<A>(d));
  const auto Q = detail::qkv_block(qkv, 0, S, d, hl), K = detail::qkv_block(qkv, 1, S, d, hl),
             V = detail::qkv_block(qkv, 2, S, d, hl);
  const auto P = detail::score_matrices(probs);
  if (keep) {  // the GEMM writes the kept buffer, the softmax reads it into probs
    detail::causal_scores_gemm(exec, Q, K, detail::score_matrices(kept_scores), S, d, B, nh);
    causal_softmax_forward(exec, kept_scores, probs, lse, scale);
  } else {
    detail::causal_scores_gemm(exec, Q, K, P, S, d, B, nh);
    causal_softmax_forward(exec, probs, lse, scale);
  }
  detail::causal_rows_gemm(exec, P, V, detail::head_columns(out, S, d), S, d, B, nh);
}

// The same without kept scores (the backward recomputes them).
template <class Exec, class QKV, class OV, class PV, class LV>
void attention_forward(const Exec& exec, const QKV& qkv, const OV& out, const PV& probs, const LV& lse,
                       const std::int64_t B, const std::int64_t S, const std::int64_t nh_local, const std::int64_t d) {
  attention_forward(exec, qkv, out, probs, lse, B, S, nh_local, d, PV());
}

// Same, with an internally allocated probs workspace (one S² allocation per call).
template <class Exec, class QKV, class OV, class LV>
void attention_forward(const Exec& exec, const QKV& qkv, const OV& out, const LV& lse,
                       const std::int64_t B, const std::int64_t S, const std::int64_t nh_local,
                       const std::int64_t d) {
  using T = typename OV::non_const_value_type;
  detail::require(B >= 0 && S >= 0 && nh_local > 0, "attention_forward",
                  "need B, S >= 0 and nh_local > 0");
  Kokkos::View<T****, Kokkos::LayoutRight, typename OV::memory_space> probs(
      Kokkos::view_alloc(exec, Kokkos::WithoutInitializing,
                         std::string("tptrain::kernels::attention_forward::probs")),
      B, nh_local, S, S);
  attention_forward(exec, qkv, out, probs, lse, B, S, nh_local, d);
  kx::fence(exec, "tptrain::kernels::attention_forward::free_probs");
}

// Backward with an explicit query row tile (tile_rows >= 1; attention_backward uses
// attention_backward_tile_rows(S)). dqkv is overwritten (all three blocks). probs
// [B, nh_local, S, S] is a workspace (it may be the one attention_forward used; its contents are
// not read); dprobs_tile [B, nh_local, >= min(S, tile_rows), S] is the row-tile workspace.
// B, nh_local, S come from probs, d = dout.extent(1) / nh_local.
//
// dk_sum (16-bit T only; may be empty): an [B*S, Hl] acc_t<T> workspace in which dK is summed
// over the query row tiles in fp32 and rounded into dqkv once, as an untiled backward would.
// Without it a 16-bit dK is rounded once per tile (ceil(S / tile_rows) times).
// scores_kept: probs holds the raw scores Q Kᵀ that attention_forward kept (kept_scores), so
// the Q Kᵀ GEMM is skipped; P is rebuilt from them in place either way.
template <class Exec, class DOV, class QKV, class LV, class DQKV, class PV, class DPV, class DKV>
void attention_backward_tiled(const Exec& exec,
                              const DOV& dout,          // [B*S, Hl]
                              const QKV& qkv,           // [B*S, 3*Hl] forward input
                              const LV& lse,            // [B*nh_local*S] from attention_forward
                              const DQKV& dqkv,         // [B*S, 3*Hl] out (overwritten)
                              const PV& probs,          // [B, nh_local, S, S] workspace (or kept scores)
                              const DPV& dprobs_tile,   // [B, nh_local, >= tile, S] workspace
                              const std::int64_t tile_rows,
                              const DKV& dk_sum,        // [B*S, Hl] acc_t workspace, or empty
                              const bool scores_kept = false) {
  detail::check_view<Exec, DOV, 2>();
  detail::check_view<Exec, QKV, 2>();
  detail::check_view<Exec, LV, 1>();
  detail::check_view<Exec, DQKV, 2>();
  detail::check_view<Exec, PV, 4>();
  detail::check_view<Exec, DPV, 4>();
  detail::check_writable<DQKV>();
  detail::check_writable<PV>();
  detail::check_writable<DPV>();
  using T = typename DQKV::non_const_value_type;
  using A = kx::acc_t<T>;
  static_assert(std::is_same<typename DOV::non_const_value_type, T>::value &&
                    std::is_same<typename QKV::non_const_value_type, T>::value &&
                    std::is_same<typename PV::non_const_value_type, T>::value &&
                    std::is_same<typename DPV::non_const_value_type, T>::value,
                "tptrain::kernels::attention_backward: dout, qkv, dqkv, probs and dprobs_tile "
                "hold one value type");
  static_assert(std::is_same<typename LV::non_const_value_type, A>::value,
                "tptrain::kernels::attention_backward: lse holds acc_t of that type");
  const char* kernel = "attention_backward";
  const std::int64_t B = probs.extent(0), nh = probs.extent(1), S = probs.extent(2);
  detail::require(nh > 0 && probs.extent(3) == static_cast<std::size_t>(S), kernel,
                  "probs must be [B, nh_local>0, S, S]");
  detail::require(tile_rows >= 1, kernel, "the row tile must be >= 1");
  const std::int64_t tile = kx::min(S, tile_rows);
  detail::require(dprobs_tile.extent(0) == probs.extent(0) &&
                      dprobs_tile.extent(1) == probs.extent(1) &&
                      dprobs_tile.extent(2) >= static_cast<std::size_t>(tile) &&
                      dprobs_tile.extent(3) == probs.extent(3),
                  kernel, "dprobs_tile must be [B, nh_local, >= tile rows, S]");
  const std::int64_t hl = dout.extent(1);
  const std::int64_t d = hl / nh;
  detail::require(d > 0 && d * nh == hl, kernel, "dout.extent(1) must be nh_local*d with d > 0");
  const auto rows = static_cast<std::size_t>(B * S);
  detail::require(dout.extent(0) == rows && qkv.extent(0) == rows && dqkv.extent(0) == rows &&
                      qkv.extent(1) == static_cast<std::size_t>(3 * hl) &&
                      dqkv.extent(1) == static_cast<std::size_t>(3 * hl),
                  kernel, "shapes must be dout[B*S,Hl], qkv,dqkv[B*S,3*Hl]");
  detail::require(lse.extent(0) == static_cast<std::size_t>(B * nh * S), kernel,
                  "lse must be [B*nh_local*S]");
  static_assert(std::is_same<typename DKV::non_const_value_type, A>::value,
                "tptrain::kernels::attention_backward: dk_sum holds acc_t of the value type");
  const bool sum_dk = kx::is_half_v<T> && dk_sum.extent(0) > 0;
  if (sum_dk) {
    detail::check_view<Exec, DKV, 2>();
    detail::require(dk_sum.extent(0) == rows && dk_sum.extent(1) == static_cast<std::size_t>(hl), kernel,
                    "dk_sum must be [B*S, Hl]");
    detail::require_unit_last_stride(dk_sum, kernel, "dk_sum rows must be contiguous");
    detail::require_blas_int(dk_sum.stride(0), kernel, "dk_sum.stride(0)");
  }
  detail::require_unit_last_stride(dout, kernel, "dout rows must be contiguous");
  detail::require_unit_last_stride(qkv, kernel, "qkv rows must be contiguous");
  detail::require_unit_last_stride(dqkv, kernel, "dqkv rows must be contiguous");
  detail::require_unit_last_stride(probs, kernel, "probs rows must be contiguous");
  detail::require_unit_last_stride(dprobs_tile, kernel, "dprobs_tile rows must be contiguous");
  // Every size check before the first launch: a refused shape leaves dqkv untouched.
  detail::league_size<Exec>(B * nh * S, kernel);
  detail::require_blas_int(dout.stride(0), kernel, "dout.stride(0)");
  detail::require_blas_int(qkv.stride(0), kernel, "qkv.stride(0)");
  detail::require_blas_int(dqkv.stride(0), kernel, "dqkv.stride(0)");
  detail::require_blas_int(probs.stride(2), kernel, "probs.stride(2)");
  detail::require_blas_int(dprobs_tile.stride(2), kernel, "dprobs_tile.stride(2)");
  detail::require_blas_int(S, kernel, "S");
  if (B == 0 || S == 0) return;
  const A scale = A(1) / kx::sqrt(static_cast<A>(d));
  const auto Q = detail::qkv_block(qkv, 0, S, d, hl), K = detail::qkv_block(qkv, 1, S, d, hl),
             V = detail::qkv_block(qkv, 2, S, d, hl);
  const auto dQ = detail::qkv_block(dqkv, 0, S, d, hl), dK = detail::qkv_block(dqkv, 1, S, d, hl),
             dV = detail::qkv_block(dqkv, 2, S, d, hl);
  const auto dO = detail::head_columns(dout, S, d);
  const auto P = detail::score_matrices(probs), dS = detail::score_matrices(dprobs_tile);
  if (!scores_kept) detail::causal_scores_gemm(exec, Q, K, P, S, d, B, nh);
  causal_softmax_recompute(exec, probs, lse, scale);
  detail::causal_cols_gemm(exec, P, dO, dV, S, d, B, nh);
  // Query row tiles, last first: the last tile sees every key, so its dK GEMM (beta = 0)
  // initialises all of dK and the earlier, shorter tiles accumulate onto it (beta = 1).
  const std::int64_t tiles = (S + tile - 1) / tile;
  for (std::int64_t t = tiles - 1; t >= 0; --t) {
    const std::int64_t r0 = t * tile, r1 = kx::min(S, r0 + tile), n = r1 - r0;
    detail::per_head_gemm(exec, 'N', 'T', n, r1, d, dO.at(r0, 0), V, dS, B, nh);
    causal_softmax_backward_rows(exec, probs, dprobs_tile, r0, r1, scale);
    detail::per_head_gemm(exec, 'N', 'N', n, d, r1, dS, K, dQ.at(r0, 0), B, nh);
    if (sum_dk)
      detail::per_head_gemm(exec, 'T', 'N', r1, d, n, dS, Q.at(r0, 0), detail::head_columns(dk_sum, S, d), B,
                            nh, t == tiles - 1 ? A(0) : A(1));
    else
      detail::per_head_gemm(exec, 'T', 'N', r1, d, n, dS, Q.at(r0, 0), dK, B, nh, t == tiles - 1 ? A(0) : A(1));
  }
  if (sum_dk)
    convert(exec, dk_sum, Kokkos::subview(dqkv, Kokkos::ALL(), std::make_pair(hl, 2 * hl)));
}

// The same without a dK workspace.
template <class Exec, class DOV, class QKV, class LV, class DQKV, class PV, class DPV>
void attention_backward_tiled(const Exec& exec, const DOV& dout, const QKV& qkv, const LV& lse,
                              const DQKV& dqkv, const PV& probs, const DPV& dprobs_tile,
                              const std::int64_t tile_rows) {
  using A = kx::acc_t<typename DQKV::non_const_value_type>;
  attention_backward_tiled(exec, dout, qkv, lse, dqkv, probs, dprobs_tile, tile_rows,
                           Kokkos::View<A**, Kokkos::LayoutRight, typename DQKV::memory_space>());
}

// Backward with the row tile attention_backward_tile_rows(S): dprobs_tile is
// [B, nh_local, >= min(S, 128), S] (a full [B, nh_local, S, S] buffer works too).
template <class Exec, class DOV, class QKV, class LV, class DQKV, class PV, class DPV>
void attention_backward(const Exec& exec,
                        const DOV& dout,            // [B*S, Hl]
                        const QKV& qkv,             // [B*S, 3*Hl] forward input
                        const LV& lse,              // [B*nh_local*S] from attention_forward
                        const DQKV& dqkv,           // [B*S, 3*Hl] out (overwritten)
                        const PV& probs,            // [B, nh_local, S, S] workspace
                        const DPV& dprobs_tile) {   // [B, nh_local, tile, S] workspace
  attention_backward_tiled(exec, dout, qkv, lse, dqkv, probs, dprobs_tile,
                           attention_backward_tile_rows(static_cast<std::int64_t>(probs.extent(2))));
}

// Same, with internally allocated workspaces (an S² and a tile×S allocation per call; pass
// workspaces to the overload above in a training loop).
template <class Exec, class DOV, class QKV, class LV, class DQKV>
void attention_backward(const Exec& exec, const DOV& dout, const QKV& qkv, const LV& lse,
                        const DQKV& dqkv, const std::int64_t B, const std::int64_t S,
                        const std::int64_t nh_local) {
  using T = typename DQKV::non_const_value_type;
  detail::require(B >= 0 && S >= 0 && nh_local > 0, "attention_backward",
                  "need B, S >= 0 and nh_local > 0");
  using W = Kokkos::View<T****, Kokkos::LayoutRight, typename DQKV::memory_space>;
  W probs(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing,
                             std::string("tptrain::kernels::attention_backward::probs")),
          B, nh_local, S, S);
  W dprobs_tile(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing,
                                   std::string("tptrain::kernels::attention_backward::dprobs_tile")),
                B, nh_local, attention_backward_tile_rows(S), S);
  attention_backward(exec, dout, qkv, lse, dqkv, probs, dprobs_tile);
  // The workspaces are freed on return: make sure the kernels using them are done.
  kx::fence(exec, "tptrain::kernels::attention_backward::free_workspaces");
}

}  // namespace tptrain::kernels
