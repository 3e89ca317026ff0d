// Causal attention in a fixed number of large calls (the device path, attention_path.hpp): every
// GEMM covers all B·nh (batch, head) pairs at once through pointer tables
// (pointer_batched_gemm.hpp; why pointers and not a relayout: see there), and the softmax passes
// are one fused kernel each. Launches per call, whatever S and B (g = nh / nkv query heads per
// key/value head, 1 without grouped-query attention):
//   forward   4: pointer tables, S = Q Kᵀ, scale+mask+softmax (causal_softmax_forward), O = P V
//   backward  7 + 2g (recompute selective / full): pointer tables, then for each of two fixed
//             query row chunks: [S | dP] = [Q | dO] [K | V]ᵀ, fused softmax backward, g times
//             [dV | dK] += [P | dS]ᵀ [dO | Q] (one group member each), dQ = dS K
//             4 + g (recompute none, the raw scores kept): one chunk, and its first GEMM is dP only
//             16-bit with dkv_sum: one more, the fp32 dK and dV rounded into dqkv.
//             V of its own width (dv != d, multi-head latent attention): a paired call has one
//             inner (S | dP: d | dv) or output width (dV | dK: dv | d), so each pair is two calls:
//             9 + 4g, or 4 + 2g with the scores kept (dP alone is one call already).
// Grouped-query attention without copies: a query head's K and V pointers are its key/value
// head's. Only the dV | dK product writes per key/value head, and the g query heads of a group
// would write one matrix in one call: its tables list the pairs by group member, one call each.
// The GEMMs do the full S×S square (the masked half too: a GPU has the flops, and it keeps each
// product one call); the softmax passes write the masked entries (causal and, with doc, outside
// the row's document) as 0.
//
// Memory: no more than the tiled path's workspaces (attention.hpp). The backward needs P and dP
// at once, but the stage holds one [B, nh, S, S] probs buffer (plus the kept scores with
// recompute none). So each pair's S² slot of probs is shared by P and dP of a query row chunk:
//   chunk 2: query rows [h, S), keys [0, S):  P and dP, (S-h)×S each, 2(S-h)S <= S²
//   chunk 1: query rows [0, h), keys [0, h):  P and dP, h×h each (causality: a query row never
//            sees a key beyond it),              2h² <= S²          (h = ceil(S/2), S >= 2)
// Chunk 2 runs first: its dV / dK GEMM covers every key and initialises dV and dK (beta 0);
// chunk 1 adds its part (beta 1). With recompute none P is rebuilt in place of the kept scores
// and dP goes to probs: one chunk. The pointer tables (24·B·nh pointers) live in the backward's
// row-tile buffer dprobs_tile, which this path does not otherwise use; the forward uses it too
// (it is a stage scratch buffer, free during a forward).
// 16-bit: dV and dK are summed in the caller's fp32 dkv_sum (cuBLAS writes fp32 from bf16
// operands) and rounded once; without it they are rounded once per chunk and group member.
// dO is read from dqkv's Q block, where the model's output projection writes it (else it is
// copied there first, one more kernel): Q, K, V, dO, dQ, dK and dV then share one row pitch, so
// S and dP, and dV and dK, are one call each (cuBLAS takes one leading dimension per operand
// list). Each chunk reads its query rows of dO before its last GEMM writes their dQ.
// Shapes: qkv, dqkv [B·S, nh·d + nkv·d + nkv·dv]; out, dO [B·S, nh·dv], dO's head h at columns
// h·dv of the Q block; dkv_sum [B·S, nkv·(d + dv)].
// Conditions (else attention.hpp runs the tiled path): S >= 2, probs LayoutRight-contiguous,
// qkv and dqkv of one row pitch, the workspace contiguous and large enough for the tables
// (batched_attention_pointer_bytes), dv <= d (dO [B·S, nh·dv] fits the Q block).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kokkos_kernels/attention_gemm.hpp"
#include "kokkos_kernels/causal_softmax.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "kokkos_kernels/pointer_batched_gemm.hpp"

namespace tptrain::kernels {

namespace detail {

// Pointer-table columns one fill kernel writes. Column c holds one matrix pointer per (batch b,
// query head h = kv·g + j, g query heads per key/value head): base + b·batch_stride +
// (key/value column ? kv : h)·head_stride bytes, at table index offset + j·sj + b·sb + kv·sk.
// A column in pair order (sj = 1, sb = nh, sk = g) lists the pairs b·nh + h; a column in member
// order lists, for each group member j, the B·nkv pairs (b, kv) with that member, so that one
// call covers the query heads of a member, and two columns interleaved by member (sj = 2·B·nkv)
// make one operand list of a paired call per member.
constexpr int max_pointer_columns = 24;

struct PointerColumns {
  unsigned char* base[max_pointer_columns];
  std::int64_t batch_stride[max_pointer_columns];
  std::int64_t head_stride[max_pointer_columns];
  bool kv_head[max_pointer_columns];
  std::int64_t offset[max_pointer_columns], sj[max_pointer_columns], sb[max_pointer_columns],
      sk[max_pointer_columns];
  int count = 0;
  std::int64_t entries = 0;  // table entries in all
  std::int64_t B, nh, nkv;
  PointerColumns(std::int64_t batches, std::int64_t heads, std::int64_t kv_heads)
      : B(batches), nh(heads), nkv(kv_heads) {}
  std::int64_t pairs() const { return B * nh; }
  std::int64_t group() const { return nh / nkv; }
  // A column in pair order; returns its first table index.
  template <class U>
  std::int64_t add(const HeadMatrices<U>& m, bool kv = false) {
    const std::int64_t first = entries;
    put(m, kv, first, 1, nh, group());
    entries += pairs();
    return first;
  }
  // Two columns interleaved by member (one operand list per member of 2·B·nkv pointers: the first
  // column's B·nkv, then the second's); returns the first table index.
  template <class U, class V>
  std::int64_t add_members(const HeadMatrices<U>& first_list, bool first_kv, const HeadMatrices<V>& second_list,
                           bool second_kv) {
    const std::int64_t first = entries, members = B * nkv;
    put(first_list, first_kv, first, 2 * members, nkv, 1);
    put(second_list, second_kv, first + members, 2 * members, nkv, 1);
    entries += 2 * pairs();
    return first;
  }

 private:
  template <class U>
  void put(const HeadMatrices<U>& m, bool kv, std::int64_t off, std::int64_t j, std::int64_t b, std::int64_t k) {
    base[count] = reinterpret_cast<unsigned char*>(const_cast<std::remove_const_t<U>*>(m.p));
    batch_stride[count] = m.batch_stride * std::int64_t(sizeof(U));
    head_stride[count] = m.head_stride * std::int64_t(sizeof(U));
    kv_head[count] = kv;
    offset[count] = off;
    sj[count] = j;
    sb[count] = b;
    sk[count] = k;
    ++count;
  }
};

template <class Exec>
void fill_pointer_tables(const Exec& exec, const PointerColumns& cols, void** table) {
  const std::int64_t pairs = cols.pairs(), nh = cols.nh, g = cols.group();
  Kokkos::parallel_for(
      "tptrain::kernels::attention_pointer_tables", range(exec, pairs * cols.count),
      KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t c = i / pairs, p = i % pairs, b = p / nh, h = p % nh, kv = h / g, j = h % g;
        table[cols.offset[c] + j * cols.sj[c] + b * cols.sb[c] + kv * cols.sk[c]] =
            cols.base[c] + b * cols.batch_stride[c] + (cols.kv_head[c] ? kv : h) * cols.head_stride[c];
      });
}

template <class U>
U* const* pointers(void** table, std::int64_t index) {
  return reinterpret_cast<U* const*>(table + index);
}

inline std::int64_t batched_split_row(std::int64_t S) { return (S + 1) / 2; }

// Fused softmax backward of one query row chunk: rows [r0, r0 + nr), keys [0, nc), for every
// pair. In: the chunk's raw scores Q Kᵀ (unscaled) in `P` and dP in `dP`. Out, in place:
// P_ij = exp(scale S_ij - lse_i) for doc_i <= j <= i (0 elsewhere), and
// dS_ij = scale P_ij (dP_ij - Σ_l P_il dP_il) there (0 elsewhere); the same arithmetic as
// causal_softmax_recompute followed by causal_softmax_backward_rows (P rounded to the storage
// type before it is used). One team per row, team reductions: deterministic.
template <class Exec, class T, class LV>
void softmax_backward_chunk(const Exec& exec, const HeadMatrices<T>& P, const HeadMatrices<T>& dP,
                            const LV& lse, const std::int64_t batches, const std::int64_t heads,
                            const std::int64_t S, const std::int64_t r0, const std::int64_t nr,
                            const std::int64_t nc, const kx::acc_t<T> scale, const std::int32_t* doc) {
  using A = kx::acc_t<T>;
  using member = typename Teams<Exec>::member_type;
  const std::int64_t rows = batches * heads * nr;
  const auto policy = teams(exec, rows, "attention_softmax_backward");
  Kokkos::parallel_for(
      "tptrain::kernels::attention_softmax_backward", policy, KOKKOS_LAMBDA(const member& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t pair = r / nr, t = r % nr, i = r0 + t;
        const std::int64_t b = pair / heads, h = pair % heads, lo = doc ? std::int64_t(doc[b * S + i]) : 0;
        T* const prow = P.p + b * P.batch_stride + h * P.head_stride + t * P.ld;
        T* const drow = dP.p + b * dP.batch_stride + h * dP.head_stride + t * dP.ld;
        const A l = lse(pair * S + i);
        A dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, lo, i + 1),
            [&](const std::int64_t j, A& acc) {
              const T p = T(kx::exp(scale * A(prow[j]) - l));
              prow[j] = p;
              acc += A(p) * A(drow[j]);
            },
            dot);
        team.team_barrier();  // every P of the row is written and every dP read
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nc), [&](const std::int64_t j) {
          if (lo <= j && j <= i) {
            drow[j] = T(scale * A(prow[j]) * (A(drow[j]) - dot));
          } else {
            prow[j] = T(0);
            drow[j] = T(0);
          }
        });
      });
}

}  // namespace detail

// Pointers the batched path keeps in its workspace (the forward needs 6 columns, the backward 20,
// 22 with dv != d).
inline std::int64_t batched_attention_pointer_bytes(std::int64_t batches, std::int64_t heads) {
  return detail::max_pointer_columns * batches * heads * static_cast<std::int64_t>(sizeof(void*));
}

// Forward over shapes attention_forward has checked (attention.hpp): qkv [B·S, (nh + nkv)·d +
// nkv·dv], out [B·S, nh·dv], query head h reading key/value head h / (nh / nkv) in place (its K
// and V pointers repeated in the tables). With `keep`, S = Q Kᵀ goes to kept_scores and the
// softmax reads it from there into probs. doc: nullptr, or [B·S] document starts.
template <class Exec, class QKV, class OV, class PV, class LV, class KV, class WV>
void attention_forward_batched(const Exec& exec, const QKV& qkv, const OV& out, const PV& probs,
                               const LV& lse, const std::int64_t B, const std::int64_t S,
                               const std::int64_t nh, const std::int64_t nkv, const std::int64_t d,
                               const KV& kept_scores, const bool keep, const WV& workspace,
                               const std::int32_t* doc, const std::int64_t dv) {
  using T = typename OV::non_const_value_type;
  using A = kx::acc_t<T>;
  const std::int64_t pairs = B * nh;
  const A scale = A(1) / kx::sqrt(static_cast<A>(d));
  const auto Q = detail::qkv_block(qkv, 0, S, d), K = detail::qkv_block(qkv, nh * d, S, d),
             V = detail::qkv_block(qkv, (nh + nkv) * d, S, dv);
  const auto P = detail::score_matrices(probs), O = detail::head_columns(out, S, dv);
  const auto scores = keep ? detail::score_matrices(kept_scores) : P;
  void** const table = reinterpret_cast<void**>(workspace.data());
  detail::PointerColumns cols(B, nh, nkv);
  const std::int64_t q = cols.add(Q), k = cols.add(K, true), s = cols.add(scores), p = cols.add(P),
                     v = cols.add(V, true), o = cols.add(O);
  detail::fill_pointer_tables(exec, cols, table);
  pointer_batched_gemm<Exec, T, T>(exec, 'N', 'T', S, S, d, A(1), detail::pointers<T>(table, q), Q.ld,
                                   detail::pointers<T>(table, k), K.ld, A(0), detail::pointers<T>(table, s),
                                   scores.ld, pairs);
  if (keep)
    causal_softmax_forward(exec, kept_scores, probs, lse, scale, doc);
  else
    causal_softmax_forward(exec, probs, lse, scale, doc);
  pointer_batched_gemm<Exec, T, T>(exec, 'N', 'N', S, dv, S, A(1), detail::pointers<T>(table, p), P.ld,
                                   detail::pointers<T>(table, v), V.ld, A(0), detail::pointers<T>(table, o), O.ld,
                                   pairs);
}

// Whether dout is dqkv's Q block (columns [0, nh·d) of each row): the model's layout, in which
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
// dkv_sum (may be empty): [B·S, nkv·(d + dv)] acc_t, where dK and dV are summed (then rounded into
// dqkv once) for 16-bit T. d, dv: Q's and K's, and V's head dims (dv <= d: dO fits the Q block).
// Grouped-query attention: dV and dK of a key/value head are sums over its g query heads, so their
// product runs once per group member (g calls, each over the B·nkv pairs of that member, adding
// to the previous): no two entries of one call write the same matrix.
template <class Exec, class DOV, class QKV, class LV, class DQKV, class PV, class KV, class WV, class SV>
void attention_backward_batched(const Exec& exec, const DOV& dout, const QKV& qkv, const LV& lse,
                                const DQKV& dqkv, const PV& probs, const KV& kept_scores,
                                const bool kept, const WV& workspace, const std::int64_t nkv, const SV& dkv_sum,
                                const std::int32_t* doc, const std::int64_t d, const std::int64_t dv) {
  using T = typename DQKV::non_const_value_type;
  using A = kx::acc_t<T>;
  const std::int64_t B = probs.extent(0), nh = probs.extent(1), S = probs.extent(2);
  const std::int64_t hl = dout.extent(1), pairs = B * nh, g = nh / nkv;  // hl = nh·dv
  const A scale = A(1) / kx::sqrt(static_cast<A>(d));
  if (!dout_in_q_block(dout, dqkv))
    Kokkos::deep_copy(exec, Kokkos::subview(dqkv, Kokkos::ALL(), std::make_pair(std::int64_t(0), hl)), dout);
  const auto Q = detail::qkv_block(qkv, 0, S, d), K = detail::qkv_block(qkv, nh * d, S, d),
             V = detail::qkv_block(qkv, (nh + nkv) * d, S, dv);
  const auto dQ = detail::qkv_block(dqkv, 0, S, d);
  const auto dO = detail::qkv_block(dqkv, 0, S, dv);  // dO lives where dQ goes (heads dv apart)
  const bool summed = kx::is_half_v<T> && dkv_sum.extent(0) > 0;
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
  // The operand lists of the calls (Q, K, V, dO and dQ, dK, dV share one leading dimension, the
  // row pitch of qkv / dqkv; with dkv_sum, dK and dV have its pitch), per chunk but K | V and
  // dV | dK, which span every key whatever the chunk:
  //   [S | dP]  = [Q | dO] [K | V]ᵀ     pair order, 2·B·nh entries each  (kept scores: dP alone)
  //   [dV | dK] += [P | dS]ᵀ [dO | Q]   member order, one call of 2·B·nkv per member
  //   dQ        = dS K                  pair order (overwrites the chunk's dO rows)
  // With dv = d the dO list is the dQ list (head h of both at columns h·d); else dQ has its own.
  // Columns: 4 + 8 per chunk (+ 1 with dv != d), at most 22 of max_pointer_columns.
  const bool paired = dv == d;
  void** const table = reinterpret_cast<void**>(workspace.data());
  detail::PointerColumns cols(B, nh, nkv);
  const std::int64_t kv = cols.add(K, true);
  cols.add(V, true);
  const std::int64_t dvdk =
      summed ? cols.add_members(detail::qkv_block(dkv_sum, nkv * d, S, dv), true, detail::qkv_block(dkv_sum, 0, S, d),
                                true)
             : cols.add_members(detail::qkv_block(dqkv, (nh + nkv) * d, S, dv), true,
                                detail::qkv_block(dqkv, nh * d, S, d), true);
  struct Lists {
    std::int64_t qdo, sdp, pds, doq, dq;
  };
  Lists lists[2];
  for (int c = 0; c < n_chunks; ++c) {
    const Chunk& k = chunks[c];
    Lists& l = lists[c];
    l.qdo = cols.add(Q.at(k.r0, 0));
    cols.add(dO.at(k.r0, 0));
    l.sdp = cols.add(k.P);
    cols.add(k.dP);
    l.pds = cols.add_members(k.P, false, k.dP, false);
    l.doq = cols.add_members(dO.at(k.r0, 0), false, Q.at(k.r0, 0), false);
    l.dq = paired ? l.qdo + pairs : cols.add(dQ.at(k.r0, 0));
  }
  detail::fill_pointer_tables(exec, cols, table);
  const std::int64_t ld = Q.ld, members = B * nkv;
  // Each pair of lists (S | dP, dV | dK) is one call when both halves have one width (dv = d),
  // else two calls.
  for (int c = 0; c < n_chunks; ++c) {
    const Chunk& k = chunks[c];
    const Lists& l = lists[c];
    // [S | dP] = [Q | dO] [K | V]ᵀ: inner dims d | dv.
    const auto scores = [&](const std::int64_t inner, const std::int64_t at, const std::int64_t count) {
      pointer_batched_gemm<Exec, T, T>(exec, 'N', 'T', k.nr, k.nc, inner, A(1), detail::pointers<T>(table, l.qdo + at),
                                       ld, detail::pointers<T>(table, kv + at), ld, A(0),
                                       detail::pointers<T>(table, l.sdp + at), k.P.ld, count);
    };
    if (kept) {
      scores(dv, pairs, pairs);
    } else if (paired) {
      scores(d, 0, 2 * pairs);
    } else {
      scores(d, 0, pairs);
      scores(dv, pairs, pairs);
    }
    detail::softmax_backward_chunk(exec, k.P, k.dP, lse, B, nh, S, k.r0, k.nr, k.nc, scale, doc);
    // [dV | dK] += [P | dS]ᵀ [dO | Q] of member j: output widths dv | d.
    const auto weights = [&](const A beta, const std::int64_t width, const std::int64_t at, const std::int64_t count) {
      if (summed)
        pointer_batched_gemm<Exec, T, A>(exec, 'T', 'N', k.nc, width, k.nr, A(1),
                                         detail::pointers<T>(table, l.pds + at), k.P.ld,
                                         detail::pointers<T>(table, l.doq + at), ld, beta,
                                         detail::pointers<A>(table, dvdk + at), dkv_sum.stride(0), count);
      else
        pointer_batched_gemm<Exec, T, T>(exec, 'T', 'N', k.nc, width, k.nr, A(1),
                                         detail::pointers<T>(table, l.pds + at), k.P.ld,
                                         detail::pointers<T>(table, l.doq + at), ld, beta,
                                         detail::pointers<T>(table, dvdk + at), ld, count);
    };
    for (std::int64_t j = 0; j < g; ++j) {
      const A beta = c == 0 && j == 0 ? A(0) : A(1);
      const std::int64_t at = j * 2 * members;
      if (paired) {
        weights(beta, d, at, 2 * members);
      } else {
        weights(beta, dv, at, members);
        weights(beta, d, at + members, members);
      }
    }
    pointer_batched_gemm<Exec, T, T>(exec, 'N', 'N', k.nr, d, k.nc, A(1), detail::pointers<T>(table, l.sdp + pairs),
                                     k.dP.ld, detail::pointers<T>(table, kv), ld, A(0),
                                     detail::pointers<T>(table, l.dq), ld, pairs);
  }
  if (summed)
    convert(exec, dkv_sum, Kokkos::subview(dqkv, Kokkos::ALL(), std::make_pair(nh * d, (nh + nkv) * d + nkv * dv)));
}

}  // namespace tptrain::kernels
