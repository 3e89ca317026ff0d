// Causal attention in a fixed number of large calls (the device path, attention_path.hpp): every
// GEMM covers all B·nh (batch, head) pairs at once through pointer tables
// (pointer_batched_gemm.hpp; why pointers and not a relayout: see there), and the softmax passes
// are one fused kernel each. Launches per call, whatever S, B and the head count:
//   forward   4: pointer tables, S = Q Kᵀ, scale+mask+softmax (causal_softmax_forward), O = P V
//   backward  9 (recompute selective / full): pointer tables, then for each of two fixed query
//             row chunks: [S | dP] = [Q | dO] [K | V]ᵀ, fused softmax backward, [dV | dK] +=
//             [P | dS]ᵀ [dO | Q], dQ = dS K
//             5 (recompute none, the raw scores kept): one chunk, and its first GEMM is dP only.
// The GEMMs do the full S×S square (the masked half too: a GPU has the flops, and it keeps each
// product one call); the softmax passes write the masked entries as 0.
//
// Memory: no more than the tiled path's workspaces (attention.hpp). The backward needs P and dP
// at once, but the stage holds one [B, nh, S, S] probs buffer (plus the kept scores with
// recompute none). So each pair's S² slot of probs is shared by P and dP of a query row chunk:
//   chunk 2: query rows [h, S), keys [0, S):  P and dP, (S-h)×S each, 2(S-h)S <= S²
//   chunk 1: query rows [0, h), keys [0, h):  P and dP, h×h each (causality: a query row never
//            sees a key beyond it),              2h² <= S²          (h = ceil(S/2), S >= 2)
// Chunk 2 runs first: its dV / dK GEMM covers every key and initialises dV and dK (beta 0);
// chunk 1 adds its part (beta 1). With recompute none P is rebuilt in place of the kept scores
// and dP goes to probs: one chunk. The pointer tables (20·B·nh pointers) live in the backward's
// row-tile buffer dprobs_tile, which this path does not otherwise use; the forward uses it too
// (it is a stage scratch buffer, free during a forward).
// 16-bit: dV and dK are rounded twice (once per chunk; the tiled path rounds dK once per row
// tile into dqkv, or once through dk_sum); every sum runs in fp32.
// dO is read from dqkv's Q block, where the model's output projection writes it (else it is
// copied there first, one more kernel): Q, K, V, dO, dQ, dK and dV then share one row pitch, so
// S and dP, and dV and dK, are one call each (cuBLAS takes one leading dimension per operand
// list). Each chunk reads its query rows of dO before its last GEMM writes their dQ.
// Conditions (else attention.hpp runs the tiled path): S >= 2, probs LayoutRight-contiguous,
// qkv and dqkv of one row pitch, the workspace contiguous and large enough for the tables
// (batched_attention_pointer_bytes).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kokkos_kernels/attention_gemm.hpp"
#include "kokkos_kernels/causal_softmax.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/pointer_batched_gemm.hpp"

namespace tptrain::kernels {

namespace detail {

// Pointer-table columns one fill kernel writes: column c, pair p = b*nh + h gets
// base[c] + b*batch_stride[c] + h*head_stride[c] at table[c*pairs + p].
constexpr int max_pointer_columns = 20;

template <class T>
struct PointerColumns {
  T* base[max_pointer_columns];
  std::int64_t batch_stride[max_pointer_columns];
  std::int64_t head_stride[max_pointer_columns];
  int count = 0;
  void add(const HeadMatrices<T>& m) {
    base[count] = m.p;
    batch_stride[count] = m.batch_stride;
    head_stride[count] = m.head_stride;
    ++count;
  }
};

// The same matrices with const taken off: the tables hold T*, and cuBLAS takes them as const
// where it only reads.
template <class T>
HeadMatrices<std::remove_const_t<T>> mutable_heads(const HeadMatrices<T>& m) {
  return {const_cast<std::remove_const_t<T>*>(m.p), m.ld, m.batch_stride, m.head_stride};
}

template <class Exec, class T>
void fill_pointer_tables(const Exec& exec, const PointerColumns<T>& cols, T** table,
                         const std::int64_t batches, const std::int64_t heads) {
  const std::int64_t pairs = batches * heads;
  Kokkos::parallel_for(
      "tptrain::kernels::attention_pointer_tables", range(exec, pairs * cols.count),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t c = i / pairs, p = i % pairs, b = p / heads, h = p % heads;
        table[i] = cols.base[c] + b * cols.batch_stride[c] + h * cols.head_stride[c];
      });
}

inline std::int64_t batched_split_row(std::int64_t S) { return (S + 1) / 2; }

// Fused softmax backward of one query row chunk: rows [r0, r0 + nr), keys [0, nc), for every
// pair. In: the chunk's raw scores Q Kᵀ (unscaled) in `P` and dP in `dP`. Out, in place:
// P_ij = exp(scale S_ij - lse_i) for j <= i (0 beyond), and
// dS_ij = scale P_ij (dP_ij - Σ_l P_il dP_il) for j <= i (0 beyond); the same arithmetic as
// causal_softmax_recompute followed by causal_softmax_backward_rows (P rounded to the storage
// type before it is used). One team per row, team reductions: deterministic.
template <class Exec, class T, class LV>
void softmax_backward_chunk(const Exec& exec, const HeadMatrices<T>& P, const HeadMatrices<T>& dP,
                            const LV& lse, const std::int64_t batches, const std::int64_t heads,
                            const std::int64_t S, const std::int64_t r0, const std::int64_t nr,
                            const std::int64_t nc, const kx::acc_t<T> scale) {
  using A = kx::acc_t<T>;
  using member = typename Teams<Exec>::member_type;
  const std::int64_t rows = batches * heads * nr;
  const auto policy = teams(exec, rows, "attention_softmax_backward");
  Kokkos::parallel_for(
      "tptrain::kernels::attention_softmax_backward", policy, KOKKOS_LAMBDA(const member& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t pair = r / nr, t = r % nr, i = r0 + t;
        const std::int64_t b = pair / heads, h = pair % heads;
        T* const prow = P.p + b * P.batch_stride + h * P.head_stride + t * P.ld;
        T* const drow = dP.p + b * dP.batch_stride + h * dP.head_stride + t * dP.ld;
        const A l = lse(pair * S + i);
        A dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, i + 1),
            [&](const std::int64_t j, A& acc) {
              const T p = T(kx::exp(scale * A(prow[j]) - l));
              prow[j] = p;
              acc += A(p) * A(drow[j]);
            },
            dot);
        team.team_barrier();  // every P of the row is written and every dP read
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nc), [&](const std::int64_t j) {
          if (j <= i) {
            drow[j] = T(scale * A(prow[j]) * (A(drow[j]) - dot));
          } else {
            prow[j] = T(0);
            drow[j] = T(0);
          }
        });
      });
}

}  // namespace detail

// Pointers the batched path keeps in its workspace (the forward needs 6 columns, the backward 22).
inline std::int64_t batched_attention_pointer_bytes(std::int64_t batches, std::int64_t heads) {
  return detail::max_pointer_columns * batches * heads * static_cast<std::int64_t>(sizeof(void*));
}

// Forward over shapes attention_forward has checked (attention.hpp). With `keep`, S = Q Kᵀ
// goes to kept_scores and the softmax reads it from there into probs.
template <class Exec, class QKV, class OV, class PV, class LV, class KV, class WV>
void attention_forward_batched(const Exec& exec, const QKV& qkv, const OV& out, const PV& probs,
                               const LV& lse, const std::int64_t B, const std::int64_t S,
                               const std::int64_t nh, const std::int64_t d, const KV& kept_scores,
                               const bool keep, const WV& workspace) {
  using T = typename OV::non_const_value_type;
  using A = kx::acc_t<T>;
  const std::int64_t pairs = B * nh, hl = nh * d;
  const A scale = A(1) / kx::sqrt(static_cast<A>(d));
  const auto Q = detail::qkv_block(qkv, 0, S, d, hl), K = detail::qkv_block(qkv, 1, S, d, hl),
             V = detail::qkv_block(qkv, 2, S, d, hl);
  const auto P = detail::score_matrices(probs), O = detail::head_columns(out, S, d);
  const auto scores = keep ? detail::score_matrices(kept_scores) : P;
  T** const table = reinterpret_cast<T**>(workspace.data());
  detail::PointerColumns<T> cols;
  for (const auto& m : {detail::mutable_heads(Q), detail::mutable_heads(K), scores, P,
                        detail::mutable_heads(V), O})
    cols.add(m);
  detail::fill_pointer_tables(exec, cols, table, B, nh);
  pointer_batched_gemm<Exec, T, T>(exec, 'N', 'T', S, S, d, A(1), table, Q.ld, table + pairs, K.ld,
                                   A(0), table + 2 * pairs, scores.ld, pairs);
  if (keep)
    causal_softmax_forward(exec, kept_scores, probs, lse, scale);
  else
    causal_softmax_forward(exec, probs, lse, scale);
  pointer_batched_gemm<Exec, T, T>(exec, 'N', 'N', S, d, S, A(1), table + 3 * pairs, P.ld,
                                   table + 4 * pairs, V.ld, A(0), table + 5 * pairs, O.ld, pairs);
}

// Whether dout is dqkv's Q block (columns [0, Hl) of each row): the model's layout, in which
// dO shares the leading dimension of Q, K and V.
template <class DOV, class DQKV>
bool dout_in_q_block(const DOV& dout, const DQKV& dqkv) {
  return static_cast<const void*>(dout.data()) == static_cast<const void*>(dqkv.data()) &&
         dout.stride(0) == dqkv.stride(0);
}

// Backward over shapes attention_backward has checked (attention.hpp). dqkv is overwritten.
// probs: the [B, nh, S, S] workspace; kept_scores: the forward's raw scores (recompute none,
// `kept`; then rebuilt into P in place) or empty. dout is read from dqkv's Q block: where the
// model puts it (dout_in_q_block), else it is copied there first (one more kernel). Each query
// row of dO is read before that row's dQ is written (dQ is the last product of its chunk).
template <class Exec, class DOV, class QKV, class LV, class DQKV, class PV, class KV, class WV>
void attention_backward_batched(const Exec& exec, const DOV& dout, const QKV& qkv, const LV& lse,
                                const DQKV& dqkv, const PV& probs, const KV& kept_scores,
                                const bool kept, const WV& workspace) {
  using T = typename DQKV::non_const_value_type;
  using A = kx::acc_t<T>;
  const std::int64_t B = probs.extent(0), nh = probs.extent(1), S = probs.extent(2);
  const std::int64_t hl = dout.extent(1), d = hl / nh, pairs = B * nh;
  const A scale = A(1) / kx::sqrt(static_cast<A>(d));
  if (!dout_in_q_block(dout, dqkv))
    Kokkos::deep_copy(exec, Kokkos::subview(dqkv, Kokkos::ALL(), std::make_pair(std::int64_t(0), hl)), dout);
  const auto Q = detail::mutable_heads(detail::qkv_block(qkv, 0, S, d, hl)),
             K = detail::mutable_heads(detail::qkv_block(qkv, 1, S, d, hl)),
             V = detail::mutable_heads(detail::qkv_block(qkv, 2, S, d, hl));
  const auto dQ = detail::qkv_block(dqkv, 0, S, d, hl), dK = detail::qkv_block(dqkv, 1, S, d, hl),
             dV = detail::qkv_block(dqkv, 2, S, d, hl);
  const auto dO = dQ;  // dO lives where dQ goes
  const auto slot = detail::score_matrices(probs);  // each pair's S² slot (contiguous, checked)

  struct Chunk {
    std::int64_t r0, nr, nc;
    detail::HeadMatrices<T> P, dP;
  };
  Chunk chunks[2];
  int n_chunks = 0;
  if (kept) {  // P in place of the kept scores, dP in probs: everything at once
    chunks[n_chunks++] = {0, S, S, detail::score_matrices(kept_scores), slot};
  } else {
    const std::int64_t h = detail::batched_split_row(S);
    // P at the slot's start, dP right after it, both with the chunk's key count as ld.
    auto part = [&](std::int64_t nc, std::int64_t offset) {
      return detail::HeadMatrices<T>{slot.p + offset, nc, slot.batch_stride, slot.head_stride};
    };
    chunks[n_chunks++] = {h, S - h, S, part(S, 0), part(S, (S - h) * S)};
    chunks[n_chunks++] = {0, h, h, part(h, 0), part(h, h * h)};
  }
  // Per chunk 10 columns; consecutive ones are the operand lists of one call (Q, K, V, dO and
  // dQ, dK, dV share one leading dimension, the row pitch of qkv / dqkv):
  //   [S | dP]  = [Q | dO] [K | V]ᵀ     A 0-1, B 2-3, C 4-5   (kept scores: A 1, B 3, C 5)
  //   [dV | dK] = [P | dS]ᵀ [dO | Q]    A 4-5, B 6-7, C 8-9   (+= for the second chunk)
  //   dQ        = dS K                  A 5,   B 2,   C 1     (overwrites the chunk's dO rows)
  T** const table = reinterpret_cast<T**>(workspace.data());
  detail::PointerColumns<T> cols;
  for (int c = 0; c < n_chunks; ++c) {
    const Chunk& k = chunks[c];
    for (const auto& m : {Q.at(k.r0, 0), dO.at(k.r0, 0), K, V, k.P, k.dP, dO.at(k.r0, 0), Q.at(k.r0, 0), dV, dK})
      cols.add(m);
  }
  detail::fill_pointer_tables(exec, cols, table, B, nh);
  const std::int64_t ld = Q.ld;
  for (int c = 0; c < n_chunks; ++c) {
    const Chunk& k = chunks[c];
    T** const col = table + c * 10 * pairs;
    auto at = [&](int column) { return col + column * pairs; };
    if (kept)
      pointer_batched_gemm<Exec, T, T>(exec, 'N', 'T', k.nr, k.nc, d, A(1), at(1), ld, at(3), ld, A(0), at(5),
                                       k.dP.ld, pairs);
    else
      pointer_batched_gemm<Exec, T, T>(exec, 'N', 'T', k.nr, k.nc, d, A(1), at(0), ld, at(2), ld, A(0), at(4),
                                       k.P.ld, 2 * pairs);
    detail::softmax_backward_chunk(exec, k.P, k.dP, lse, B, nh, S, k.r0, k.nr, k.nc, scale);
    pointer_batched_gemm<Exec, T, T>(exec, 'T', 'N', k.nc, d, k.nr, A(1), at(4), k.P.ld, at(6), ld,
                                     c == 0 ? A(0) : A(1), at(8), ld, 2 * pairs);
    pointer_batched_gemm<Exec, T, T>(exec, 'N', 'N', k.nr, d, k.nc, A(1), at(5), k.dP.ld, at(2), ld, A(0), at(1),
                                     ld, pairs);
  }
}

}  // namespace tptrain::kernels
