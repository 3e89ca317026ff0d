// Flash attention (Dao, "FlashAttention-2", 2023): causal multi-head attention of the local heads
// of a tensor-parallel rank, tiled over query and key blocks with an online softmax, so that no
// S × S buffer exists; the one attention algorithm of training, eval and generation against the
// key/value cache.
//
// Per query head h (key/value head g = h / (nh / nkv): grouped-query attention reads its key/value
// head in place, Hugging Face's repeat_kv without the copy), query rows at positions q0 + i,
// keys at positions j in [0, Sk), rows of Q and K of d features and rows of V and O of dv (dv = d
// but in multi-head latent attention, DeepSeek-V2/V3: d = 192, dv = 128), scale = 1/sqrt(d):
//   visible(i, j) = doc_i <= j <= q0 + i     (doc_i = 0, or the first position of row i's document)
//   forward, per query block, over the key blocks it sees (a running max m and sum l per row):
//     S = Q Kᵀ (over d);  m' = max(m, scale·max_j S);  P = exp(scale S - m');  l = l·exp(m - m') + Σ P
//     O = O·exp(m - m') + P V (rows of dv);   finally O /= l,  lse = m + log l   (the backward's only state)
//   backward (one pass per (batch, key/value head) over the key blocks; per key block its query
//   heads' query blocks that see it), D_i = Σ_e dO_ie O_ie over dv (computed once per row):
//     P = exp(scale Q Kᵀ - lse);  dP = dO Vᵀ (over dv);  dS = scale P ∘ (dP - D)
//     dK += dSᵀ Q, dQ += dS K (rows of d);  dV += Pᵀ dO (rows of dv; the key block's, in scratch,
//     written once)
// Causality and documents at block granularity: a query block [r0, r1) visits the key blocks of
// [doc_{r0}, q0 + r1) only (doc is non-decreasing along a sequence, so doc_{r0} is the block's
// least), and a key block [c0, c1) the query rows of [c0, first row whose document starts at or
// after c1): the blocks above the diagonal and those wholly outside the rows' documents are never
// computed; within a visited block the invisible entries are skipped row by row.
//
// Blocks and teams: the forward's team, one per (batch, query head, query block of 256 rows,
// flash_query_rows), streams the key blocks (64, flash_key_rows); the backward's team, one per
// (batch, key/value head), walks the key blocks (256, flash_backward_key_rows) in order and
// streams, for each, the query blocks (64, flash_backward_query_rows) of its group's query heads.
// It owns dK and dV of its key/value head (summed over the group and the query blocks in scratch:
// no buffer of the sequence's size, no atomics) and dQ of its query heads, summed over the key
// blocks in the caller's acc_t buffer dq_sum, in order: deterministic. A row sees no key after its
// own position, so its dQ is complete, and written, once the key block holding that position is
// done. Each team's tiles live in team scratch (level 0 when they fit, else level 1):
// flash_forward_scratch_elements(d, dv) and flash_backward_scratch_elements(d, dv) values, d' and
// dv' = d and dv rounded up to 16, independent of S. The block products are flash_block.hpp's.
//
// Precision: Q, K, V, O, dO and the gradients hold the storage type T (float, double, bf16,
// fp16); the tiles, scores, running max and sum, D, lse and the dQ sums are acc_t<T> (fp32 for
// 16-bit T), and each output is rounded once.
//
// Operands are addressed through FlashHeads (pointer and strides), so that Q, K and V can be
// column blocks of the QKV output [B·S, nh·d + nkv·d + nkv·dv] or the key/value caches
// [nkv, P, d] (K) and [nkv, P, dv] (V).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/flash_block.hpp"
#include "kokkos_kernels/kv_cache_append.hpp"
#include "kokkos_kernels/views.hpp"

namespace tptrain::kernels {

// Element e of (batch b, head h, position j) at p[b·batch + h·head + j·row + e] (unit stride in e).
template <class T>
struct FlashHeads {
  T* p = nullptr;
  std::int64_t row = 0, batch = 0, head = 0;
  KOKKOS_INLINE_FUNCTION T* at(const std::int64_t b, const std::int64_t h, const std::int64_t j) const {
    return p + b * batch + h * head + j * row;
  }
};

// B sequences of Sq query rows at positions q0 .. q0 + Sq - 1 against keys at k0 .. k0 + Sk - 1
// (training: q0 = k0 = 0, Sq = Sk = S; a cached generation step: q0 = p, Sq = n, Sk = p + n; ring
// attention, src/model/ring_attention.hpp: one chunk of the sequence against another, at their
// global positions). doc_stride: the distance between sequences in doc (0: Sq). d: the features
// of a row of Q and K; dv: those of a row of V, O, dO and dV (0: d). dv is last so that the
// aggregate initialisations {B, Sq, Sk, nh, nkv, d, q0} keep their meaning.
struct FlashShape {
  std::int64_t B = 0, Sq = 0, Sk = 0, nh = 1, nkv = 1, d = 1, q0 = 0, k0 = 0, doc_stride = 0, dv = 0;
  std::int64_t doc_batch() const { return doc_stride > 0 ? doc_stride : Sq; }
  std::int64_t value_dim() const { return dv > 0 ? dv : d; }
};

// Rows of a query block and of a key block. The forward's team holds a query block and streams
// the key blocks; every (query block, key block) pair loads the key and value tiles again, which
// beside the products cost the most on a CPU: 256 query rows load them a quarter as often per
// FLOP as 64 (GPT-2 124M, S = 4096: attention 1.99 s at 64 rows, 1.5 at 128, about 1.45 at 256
// per layer, before the micro-kernel's FMAs). Key blocks of 64 keep the diagonal's waste and the
// tiles small. The backward's team holds a key block (whose dK and dV it sums) and streams the
// query blocks: the same sizes, the roles swapped.
inline constexpr std::int64_t flash_query_rows = 256;
inline constexpr std::int64_t flash_key_rows = 64;
inline constexpr std::int64_t flash_backward_key_rows = 256;
inline constexpr std::int64_t flash_backward_query_rows = 64;

namespace detail {

inline void check_flash_shape(const FlashShape& s, const char* kernel) {
  require(s.B >= 0 && s.Sq >= 0 && s.Sk >= 0 && s.nh > 0 && s.nkv > 0 && s.d > 0 && s.q0 >= 0 && s.k0 >= 0 &&
              s.doc_stride >= 0 && s.dv >= 0,
          kernel, "need B, Sq, Sk, q0, k0, dv >= 0 and nh, nkv, d > 0");
  require(s.nh % s.nkv == 0, kernel, "the key/value heads nkv must divide the query heads nh");
  // Keys need not reach the queries' positions (ring attention's chunk pairs): a row that sees
  // no key ends with O = 0 and lse = -inf.
}

// A league of flash teams, each with `elements` acc_t values of team scratch: level 0 when they
// fit, else level 1 (global memory per team).
template <class Exec>
struct FlashLaunch {
  Teams<Exec> policy;
  int level;
};
template <class Exec, class F>
FlashLaunch<Exec> flash_launch(const Exec& exec, const std::int64_t league, const std::int64_t elements,
                               const char* kernel) {
  const std::size_t bytes = scratch_row_bytes<Exec, F>(elements);
  FlashLaunch<Exec> l{teams(exec, league, kernel), fits_team_scratch<Exec>(bytes) ? 0 : 1};
  l.policy.set_scratch_size(l.level, Kokkos::PerTeam(bytes));
  return l;
}

// The visible key range [lo, hi) of query row i (position pos) inside key block [c0, c0 + cols),
// as offsets from c0 (hi <= lo: none).
struct KeyRange {
  std::int64_t lo, hi;
};
KOKKOS_INLINE_FUNCTION KeyRange visible_keys(const std::int64_t doc, const std::int64_t pos, const std::int64_t c0,
                                             const std::int64_t cols) {
  const std::int64_t lo = doc > c0 ? doc - c0 : 0;
  const std::int64_t hi = pos + 1 - c0 < cols ? pos + 1 - c0 : cols;
  return {lo, hi};
}

}  // namespace detail

// Scratch floats per team of the forward and backward for query/key head dim d and value head
// dim dv (0: d) (docs, planner): exactly what the kernels take.
inline std::int64_t flash_forward_scratch_elements(const std::int64_t d, const std::int64_t dv = 0) {
  const std::int64_t dp = detail::flash_padded(d), dvp = detail::flash_padded(dv > 0 ? dv : d);
  const std::int64_t q = flash_query_rows, k = flash_key_rows;
  return q * dp + k * dp + k * dvp + q * dvp + q * k + 2 * q;  // Q; Kᵀ; V; O; S; max, sum
}
inline std::int64_t flash_backward_scratch_elements(const std::int64_t d, const std::int64_t dv = 0) {
  const std::int64_t dp = detail::flash_padded(d), dvp = detail::flash_padded(dv > 0 ? dv : d);
  const std::int64_t q = flash_backward_query_rows, k = flash_backward_key_rows;
  // K, dK; dV; Kᵀ; Vᵀ; Q, dQ; dO; P, dS; lse, D
  return 2 * k * dp + k * dvp + dp * k + dvp * k + 2 * q * dp + q * dvp + 2 * q * k + 2 * q;
}
// O and lse ((b·nh + h)·Sq + i) of every query row. doc: nullptr, or doc[b·doc_batch + i] the first
// key position of query row i's document (non-decreasing in i, <= q0 + i).
// resume (ring attention): o (acc_t) and lse hold the attention of the rows over other keys
// already, and end with it over those keys and these: the online softmax starts from m = lse,
// l = 1, O = o (Milakov & Gimelshein 2018's merge of partial softmaxes). A row that has seen no
// key keeps lse = -inf and o = 0 (not 0/0).
template <class Exec, class T, class OT = T>
void flash_attention_forward(const Exec& exec, const FlashShape& s, const FlashHeads<const T>& q,
                             const FlashHeads<const T>& k, const FlashHeads<const T>& v, const FlashHeads<OT>& o,
                             kx::acc_t<T>* lse, const std::int32_t* doc, const bool resume = false) {
  using F = kx::acc_t<T>;
  static_assert(std::is_same<OT, T>::value || std::is_same<OT, F>::value,
                "tptrain::kernels::flash_attention_forward: O holds the storage type or acc_t");
  const char* kernel = "flash_attention_forward";
  detail::check_flash_shape(s, kernel);
  const std::int64_t Bq = flash_query_rows, Bk = flash_key_rows;
  const std::int64_t nq = (s.Sq + Bq - 1) / Bq;
  const auto policy_size = detail::league_size<Exec>(s.B * s.nh * nq, kernel);
  if (s.B == 0 || s.Sq == 0) return;
  const std::int64_t d = s.d, dp = detail::flash_padded(d), nh = s.nh, Sq = s.Sq, Sk = s.Sk, q0 = s.q0, k0 = s.k0;
  const std::int64_t dv = s.value_dim(), dvp = detail::flash_padded(dv);
  const std::int64_t ds = s.doc_batch();
  const std::int64_t group = s.nh / s.nkv;
  const std::int64_t elements = flash_forward_scratch_elements(d, dv);
  const auto launch = detail::flash_launch<Exec, F>(exec, policy_size, elements, kernel);
  const int level = launch.level;
  const F scale = F(1) / kx::sqrt(static_cast<F>(d));
  using member = typename detail::Teams<Exec>::member_type;
  Kokkos::parallel_for(
      "tptrain::kernels::flash_attention_forward", launch.policy, KOKKOS_LAMBDA(const member& team) {
        const std::int64_t r = team.league_rank();
        const std::int64_t qb = r % nq, h = (r / nq) % nh, b = r / (nq * nh), g = h / group;
        const std::int64_t r0 = qb * Bq, rows = kx::min(Bq, Sq - r0), Mr = (rows + 3) / 4 * 4;
        F* const Qs = detail::ScratchRow<Exec, F>(team.team_scratch(level), elements).data();
        F* const Kt = Qs + Bq * dp;   // [dp][Bk]
        F* const Vs = Kt + dp * Bk;   // [Bk][dvp]
        F* const Os = Vs + Bk * dvp;  // [Bq][dvp]
        F* const Ss = Os + Bq * dvp;  // [Bq][Bk]
        F* const mrow = Ss + Bq * Bk;
        F* const lrow = mrow + Bq;
        detail::team_for<Exec>(team, 0, Bq * dp + dp * Bk + Bk * dvp + Bq * dvp,
                               [&](const std::int64_t e) { Qs[e] = 0; });
        detail::team_for<Exec>(team, 0, Bq * Bk, [&](const std::int64_t e) { Ss[e] = 0; });
        detail::team_for<Exec>(team, 0, Bq, [&](const std::int64_t i) { lrow[i] = mrow[i] = 0; });
        team.team_barrier();
        detail::tile_for<Exec>(team, rows, d, [&](const std::int64_t i, const std::int64_t c) {
          Qs[i * dp + c] = F(q.at(b, h, r0 + i)[c]);
        });
        if (resume) {  // the state of the keys seen before: m = lse, l = 1 (0: none), O
          team.team_barrier();
          detail::team_for<Exec>(team, 0, rows, [&](const std::int64_t i) {
            const F l = lse[(b * nh + h) * Sq + r0 + i];
            const bool seen = l > -kx::infinity<F>();
            mrow[i] = seen ? l : F(0);
            lrow[i] = seen ? F(1) : F(0);
          });
          detail::tile_for<Exec>(team, rows, dv, [&](const std::int64_t i, const std::int64_t c) {
            Os[i * dvp + c] = F(o.at(b, h, r0 + i)[c]);
          });
        }
        // Keys (local index) up to the block's last row's position, from its first row's document.
        const std::int64_t kend = kx::min(Sk, q0 + r0 + rows - k0);
        const std::int64_t kbeg = doc ? kx::max(std::int64_t(doc[b * ds + r0]) - k0, std::int64_t(0)) : 0;
        for (std::int64_t c0 = kbeg / Bk * Bk; c0 < kend; c0 += Bk) {
          const std::int64_t cols = kx::min(Bk, kend - c0);
          team.team_barrier();  // the previous block's P V is done with Vs and Ss
          detail::tile_for<Exec>(team, cols, d, [&](const std::int64_t j, const std::int64_t c) {
            Kt[c * Bk + j] = F(k.at(b, g, c0 + j)[c]);
          });
          detail::tile_for<Exec>(team, cols, dv, [&](const std::int64_t j, const std::int64_t c) {
            Vs[j * dvp + c] = F(v.at(b, g, c0 + j)[c]);  // a loop of its own: a contiguous copy, vectorised
          });
          team.team_barrier();
          detail::flash_block<Exec>(team, Mr, cols, d, Qs, dp, 1, Kt, Bk, Ss, Bk, false);
          // The online softmax of each row over its visible keys of the block (one thread a row).
          detail::team_for<Exec>(team, 0, rows, [&](const std::int64_t i) {
            F* const srow = Ss + i * Bk;
            const detail::KeyRange kr =
                detail::visible_keys(doc ? doc[b * ds + r0 + i] : 0, q0 + r0 + i, k0 + c0, cols);
            for (std::int64_t j = 0; j < kx::min(kr.lo, Bk); ++j) srow[j] = 0;
            for (std::int64_t j = kx::max(kr.hi, kr.lo); j < Bk; ++j) srow[j] = 0;
            if (kr.hi <= kr.lo) return;
            // The row's max in 16 lanes, then across them: max is exact in any order, and the
            // lanes vectorise where one running max is a chain of dependent instructions.
            F lane[16];
            for (int u = 0; u < 16; ++u) lane[u] = srow[kr.lo];
            std::int64_t jm = kr.lo;
            for (; jm + 16 <= kr.hi; jm += 16)
              for (int u = 0; u < 16; ++u) lane[u] = kx::max(lane[u], srow[jm + u]);
            for (; jm < kr.hi; ++jm) lane[0] = kx::max(lane[0], srow[jm]);
            F smax = lane[0];
            for (int u = 1; u < 16; ++u) smax = kx::max(smax, lane[u]);
            const bool first = lrow[i] == F(0);
            const F mnew = first ? scale * smax : kx::max(mrow[i], scale * smax);
            F sum = 0;
            {
              constexpr int width = 16;  // as detail::team_sum: the exps vectorise, the sum keeps its order
              std::int64_t j = kr.lo;
              for (; j + width <= kr.hi; j += width) {
                F e[width];
                for (int u = 0; u < width; ++u) e[u] = kx::exp(scale * srow[j + u] - mnew);
                for (int u = 0; u < width; ++u) {
                  srow[j + u] = e[u];
                  sum += e[u];
                }
              }
              for (; j < kr.hi; ++j) {
                srow[j] = kx::exp(scale * srow[j] - mnew);
                sum += srow[j];
              }
            }
            const F corr = first ? F(0) : kx::exp(mrow[i] - mnew);
            lrow[i] = lrow[i] * corr + sum;
            mrow[i] = mnew;
            if (!first)
              for (std::int64_t c = 0; c < dv; ++c) Os[i * dvp + c] *= corr;
          });
          team.team_barrier();
          detail::flash_block<Exec>(team, Mr, dv, cols, Ss, Bk, 1, Vs, dvp, Os, dvp, true);
        }
        team.team_barrier();
        detail::tile_for<Exec>(team, rows, dv, [&](const std::int64_t i, const std::int64_t c) {
          o.at(b, h, r0 + i)[c] = lrow[i] > F(0) ? OT(Os[i * dvp + c] / lrow[i]) : OT(0);
        });
        detail::team_for<Exec>(team, 0, rows, [&](const std::int64_t i) {
          lse[(b * nh + h) * Sq + r0 + i] = lrow[i] > F(0) ? mrow[i] + kx::log(lrow[i]) : -kx::infinity<F>();
        });
      });
}

// dQ, dK, dV from dO, the forward's inputs, O and lse (q0 = k0 = 0 and Sq = Sk: training). With
// dv = d, dq may be the storage of dO (the model writes dO into the Q block of its QKV gradient): a
// row's dQ is written once the key block holding its position is done, after which no block reads
// its dO (with dv != d a head's dQ covers other heads' dO, which other teams may still read).
// q, k, dq, dk, dq_sum: rows of d; v, o, dout, dv: rows of s.value_dim().
// dq_sum: where dQ is summed in acc_t over the key blocks, [B, nh, Sq] rows of d; delta: the
// rows' D = Σ_e dO_ie O_ie, (b·nh + h)·Sq + i, computed here (both workspaces, overwritten).
// accumulate (ring attention: one chunk of queries against one chunk of keys, any q0, k0): delta
// holds D already (flash_attention_delta), dQ is added to dq_sum (not written to dq, which is
// unused), and dK, dV (acc_t, DKT = F) are added to dk and dv; o is unused.
template <class Exec, class T, class DKT = T>
void flash_attention_backward(const Exec& exec, const FlashShape& s, const FlashHeads<const T>& q,
                              const FlashHeads<const T>& k, const FlashHeads<const T>& v,
                              const FlashHeads<const T>& o, const FlashHeads<const T>& dout,
                              const kx::acc_t<T>* lse, const std::int32_t* doc, const FlashHeads<T>& dq,
                              const FlashHeads<DKT>& dk, const FlashHeads<DKT>& dv,
                              const FlashHeads<kx::acc_t<T>>& dq_sum, kx::acc_t<T>* delta,
                              const bool accumulate = false) {
  using F = kx::acc_t<T>;
  static_assert(std::is_same<DKT, T>::value || std::is_same<DKT, F>::value,
                "tptrain::kernels::flash_attention_backward: dK and dV hold the storage type or acc_t");
  const char* kernel = "flash_attention_backward";
  detail::check_flash_shape(s, kernel);
  detail::require(accumulate || (s.q0 == 0 && s.k0 == 0 && s.Sq == s.Sk), kernel,
                  "the backward takes every sequence against itself (q0 = k0 = 0, Sq = Sk) unless it accumulates");
  const auto teams_n = detail::league_size<Exec>(s.B * s.nkv, kernel);
  if (s.B == 0 || s.Sk == 0) return;
  const std::int64_t Bq = flash_backward_query_rows, Bk = flash_backward_key_rows;
  const std::int64_t d = s.d, dp = detail::flash_padded(d), nh = s.nh, S = s.Sq, Sk = s.Sk, q0 = s.q0, k0 = s.k0;
  const std::int64_t d_v = s.value_dim(), dvp = detail::flash_padded(d_v);  // V's width (dv is V's gradient)
  const std::int64_t ds = s.doc_batch();
  const std::int64_t group = s.nh / s.nkv;
  const std::int64_t elements = flash_backward_scratch_elements(d, d_v);
  // The key blocks some query row sees: positions up to the last row's.
  const std::int64_t kend = kx::min(Sk, q0 + S - k0);
  const auto launch = detail::flash_launch<Exec, F>(exec, teams_n, elements, kernel);
  const int level = launch.level;
  const F scale = F(1) / kx::sqrt(static_cast<F>(d));
  using member = typename detail::Teams<Exec>::member_type;
  Kokkos::parallel_for(
      "tptrain::kernels::flash_attention_backward", launch.policy, KOKKOS_LAMBDA(const member& team) {
        const std::int64_t b = team.league_rank() / s.nkv, g = team.league_rank() % s.nkv;
        F* const Ks = detail::ScratchRow<Exec, F>(team.team_scratch(level), elements).data();
        F* const dKs = Ks + Bk * dp;    // [Bk][dp]
        F* const dVs = dKs + Bk * dp;   // [Bk][dvp]
        F* const Kt = dVs + Bk * dvp;   // [dp][Bk]
        F* const Vt = Kt + dp * Bk;     // [dvp][Bk]
        F* const Qs = Vt + dvp * Bk;    // [Bq][dp]
        F* const dOs = Qs + Bq * dp;    // [Bq][dvp]
        F* const dQs = dOs + Bq * dvp;  // [Bq][dp]
        F* const Ps = dQs + Bq * dp;    // [Bq][Bk]
        F* const dSs = Ps + Bq * Bk;    // [Bq][Bk]
        F* const lrow = dSs + Bq * Bk;
        F* const Drow = lrow + Bq;
        detail::team_for<Exec>(team, 0, elements, [&](const std::int64_t e) { Ks[e] = 0; });
        // The group's dQ sums start at 0, and D of each of its rows is computed once.
        for (std::int64_t h = g * group; h < (g + 1) * group && !accumulate; ++h) {
          detail::tile_for<Exec>(team, S, d, [&](const std::int64_t i, const std::int64_t c) { dq_sum.at(b, h, i)[c] = 0; });
          detail::team_for<Exec>(team, 0, S, [&](const std::int64_t i) {
            F D = 0;
            for (std::int64_t c = 0; c < d_v; ++c) D += F(dout.at(b, h, i)[c]) * F(o.at(b, h, i)[c]);
            delta[(b * nh + h) * S + i] = D;
          });
        }
        for (std::int64_t c0 = 0; c0 < kend; c0 += Bk) {
          const std::int64_t cols = kx::min(Bk, Sk - c0), Mc = (cols + 3) / 4 * 4, c1 = c0 + cols;
          // The rows that see a key of the block: position q0 + i >= k0 + c0 with doc_i < k0 + c1, a
          // range [ibeg, iend) as doc is non-decreasing (found by bisection).
          const std::int64_t ibeg = kx::max(k0 + c0 - q0, std::int64_t(0));
          std::int64_t iend = S;
          if (doc) {
            std::int64_t lo = ibeg, hi = S;
            while (lo < hi) {
              const std::int64_t mid = lo + (hi - lo) / 2;
              if (doc[b * ds + mid] < k0 + c1) lo = mid + 1;
              else hi = mid;
            }
            iend = lo;
          }
          team.team_barrier();  // the previous block's dK, dV and dQ are written out
          if (d_v == d) {  // one pass over the key rows for both tiles (the common layout)
            detail::tile_for<Exec>(team, cols, d, [&](const std::int64_t j, const std::int64_t c) {
              const F kv = F(k.at(b, g, c0 + j)[c]);
              Ks[j * dp + c] = kv;
              Kt[c * Bk + j] = kv;
              Vt[c * Bk + j] = F(v.at(b, g, c0 + j)[c]);
            });
          } else {
            detail::tile_for<Exec>(team, cols, d, [&](const std::int64_t j, const std::int64_t c) {
              const F kv = F(k.at(b, g, c0 + j)[c]);
              Ks[j * dp + c] = kv;
              Kt[c * Bk + j] = kv;
            });
            detail::tile_for<Exec>(team, cols, d_v, [&](const std::int64_t j, const std::int64_t c) {
              Vt[c * Bk + j] = F(v.at(b, g, c0 + j)[c]);
            });
          }
          detail::team_for<Exec>(team, 0, Bk * dp + Bk * dvp, [&](const std::int64_t e) { dKs[e] = 0; });  // dK, dV
          for (std::int64_t h = g * group; h < (g + 1) * group; ++h) {
            for (std::int64_t r0 = ibeg; r0 < iend; r0 += Bq) {
              const std::int64_t rows = kx::min(Bq, S - r0), Mr = (rows + 3) / 4 * 4;
              team.team_barrier();  // the previous query block's products are done with the tiles
              // One tile a loop: each a contiguous copy per row, which vectorises (the tiles are
              // streamed from memory once per key block).
              detail::tile_for<Exec>(team, rows, d, [&](const std::int64_t i, const std::int64_t c) {
                Qs[i * dp + c] = F(q.at(b, h, r0 + i)[c]);
              });
              detail::tile_for<Exec>(team, rows, d_v, [&](const std::int64_t i, const std::int64_t c) {
                dOs[i * dvp + c] = F(dout.at(b, h, r0 + i)[c]);
              });
              detail::tile_for<Exec>(team, rows, d, [&](const std::int64_t i, const std::int64_t c) {
                dQs[i * dp + c] = dq_sum.at(b, h, r0 + i)[c];
              });
              if (d_v == d) {
                detail::team_for<Exec>(team, rows * dp, Bq * dp, [&](const std::int64_t e) {
                  Qs[e] = dOs[e] = 0;  // the last block's padding rows
                });
              } else {
                detail::team_for<Exec>(team, rows * dp, Bq * dp, [&](const std::int64_t e) { Qs[e] = 0; });
                detail::team_for<Exec>(team, rows * dvp, Bq * dvp, [&](const std::int64_t e) { dOs[e] = 0; });
              }
              detail::team_for<Exec>(team, 0, rows, [&](const std::int64_t i) {
                lrow[i] = lse[(b * nh + h) * S + r0 + i];
                Drow[i] = delta[(b * nh + h) * S + r0 + i];
              });
              team.team_barrier();
              detail::flash_block<Exec>(team, Mr, cols, d, Qs, dp, 1, Kt, Bk, Ps, Bk, false);
              detail::flash_block<Exec>(team, Mr, cols, d_v, dOs, dvp, 1, Vt, Bk, dSs, Bk, false);
              detail::team_for<Exec>(team, 0, Bq, [&](const std::int64_t i) {
                F* const prow = Ps + i * Bk;
                F* const dsrow = dSs + i * Bk;
                const detail::KeyRange kr =
                    i < rows ? detail::visible_keys(doc ? doc[b * ds + r0 + i] : 0, q0 + r0 + i, k0 + c0, cols)
                             : detail::KeyRange{0, 0};
                const std::int64_t lo = kx::min(kr.lo, Bk), hi = kx::max(kr.hi, lo);
                for (std::int64_t j = 0; j < lo; ++j) prow[j] = dsrow[j] = 0;
                for (std::int64_t j = hi; j < Bk; ++j) prow[j] = dsrow[j] = 0;
                const F l = lrow[i], D = Drow[i];
                for (std::int64_t j = lo; j < hi; ++j) {
                  const F p = kx::exp(scale * prow[j] - l);
                  prow[j] = p;
                  dsrow[j] = scale * p * (dsrow[j] - D);
                }
              });
              team.team_barrier();
              detail::flash_block<Exec>(team, Mr, d, cols, dSs, Bk, 1, Ks, dp, dQs, dp, true);
              // dK += dSᵀ Q and dV += Pᵀ dO (A(m = key j, k = query i) = dS[i][j]).
              detail::flash_block<Exec>(team, Mc, d, rows, dSs, 1, Bk, Qs, dp, dKs, dp, true);
              detail::flash_block<Exec>(team, Mc, d_v, rows, Ps, 1, Bk, dOs, dvp, dVs, dvp, true);
              detail::tile_for<Exec>(team, rows, d, [&](const std::int64_t i, const std::int64_t c) {
                dq_sum.at(b, h, r0 + i)[c] = dQs[i * dp + c];
              });
            }
          }
          team.team_barrier();
          if (accumulate) {
            if (d_v == d) {
              detail::tile_for<Exec>(team, cols, d, [&](const std::int64_t j, const std::int64_t c) {
                dk.at(b, g, c0 + j)[c] += DKT(dKs[j * dp + c]);
                dv.at(b, g, c0 + j)[c] += DKT(dVs[j * dp + c]);
              });
            } else {
              detail::tile_for<Exec>(team, cols, d, [&](const std::int64_t j, const std::int64_t c) {
                dk.at(b, g, c0 + j)[c] += DKT(dKs[j * dp + c]);
              });
              detail::tile_for<Exec>(team, cols, d_v, [&](const std::int64_t j, const std::int64_t c) {
                dv.at(b, g, c0 + j)[c] += DKT(dVs[j * dvp + c]);
              });
            }
            continue;
          }
          // The block's keys are done, and so are the rows at its positions: no later block is
          // seen by them, so their dQ is complete and their dO read for the last time.
          if (d_v == d) {
            detail::tile_for<Exec>(team, cols, d, [&](const std::int64_t j, const std::int64_t c) {
              dk.at(b, g, c0 + j)[c] = DKT(dKs[j * dp + c]);
              dv.at(b, g, c0 + j)[c] = DKT(dVs[j * dp + c]);
            });
          } else {
            detail::tile_for<Exec>(team, cols, d, [&](const std::int64_t j, const std::int64_t c) {
              dk.at(b, g, c0 + j)[c] = DKT(dKs[j * dp + c]);
            });
            detail::tile_for<Exec>(team, cols, d_v, [&](const std::int64_t j, const std::int64_t c) {
              dv.at(b, g, c0 + j)[c] = DKT(dVs[j * dvp + c]);
            });
          }
          for (std::int64_t h = g * group; h < (g + 1) * group; ++h)
            detail::tile_for<Exec>(team, cols, d, [&](const std::int64_t i, const std::int64_t c) {
              dq.at(b, h, c0 + i)[c] = T(dq_sum.at(b, h, c0 + i)[c]);
            });
        }
      });
}

// D_i = Σ_e dO_ie O_ie (e < s.value_dim()) of every query row, at (b·nh + h)·Sq + i: the
// accumulating backward's delta (the same sum, in the same order, as the backward computes for
// itself).
template <class Exec, class T>
void flash_attention_delta(const Exec& exec, const FlashShape& s, const FlashHeads<const T>& o,
                           const FlashHeads<const T>& dout, kx::acc_t<T>* delta) {
  using F = kx::acc_t<T>;
  detail::check_flash_shape(s, "flash_attention_delta");
  const std::int64_t nh = s.nh, Sq = s.Sq, dv = s.value_dim();
  Kokkos::parallel_for(
      "tptrain::kernels::flash_attention_delta", detail::range(exec, s.B * nh * Sq), KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t i = r % Sq, h = (r / Sq) % nh, b = r / (Sq * nh);
        F D = 0;
        for (std::int64_t c = 0; c < dv; ++c) D += F(dout.at(b, h, i)[c]) * F(o.at(b, h, i)[c]);
        delta[r] = D;
      });
}

// ---- the model's operands -------------------------------------------------------------------
// qkv [B·S, nh·d + nkv·d + nkv·dv] (the QKV layer's output: Q of the nh heads, then K of the nkv
// key/value heads, then their V, dv = d but in multi-head latent attention), and the heads of a
// [B·S, nh·dv] context. qkv_heads: the heads of width `width` of the column block starting at
// block_offset (0, nh·d, nh·d + nkv·d).
template <class T, class V>
FlashHeads<T> qkv_heads(const V& qkv, const std::int64_t block_offset, const std::int64_t S,
                        const std::int64_t width) {
  const std::int64_t ld = qkv.stride(0);
  return {const_cast<T*>(qkv.data()) + block_offset, ld, S * ld, width};
}

// Training and eval: every sequence against itself (q0 = 0). doc: empty, or [B·S] document starts.
// dv: V's and O's head dim (0: d); out [B·S, nh·dv].
template <class Exec, class QKV, class OV, class LV, class DV>
void flash_attention_forward(const Exec& exec, const QKV& qkv, const OV& out, const LV& lse, const std::int64_t B,
                             const std::int64_t S, const std::int64_t nh, const std::int64_t nkv,
                             const std::int64_t d, const DV& doc, const std::int64_t dv = 0) {
  using T = typename OV::non_const_value_type;
  detail::check_view<Exec, QKV, 2>();
  detail::check_view<Exec, OV, 2>();
  detail::check_view<Exec, LV, 1>();
  const char* kernel = "flash_attention_forward";
  detail::require(B >= 0 && S >= 0 && nh > 0 && nkv > 0 && d > 0 && dv >= 0, kernel,
                  "need B, S, dv >= 0 and nh, nkv, d > 0");
  const std::int64_t d_v = dv > 0 ? dv : d;
  detail::require(qkv.extent(0) == std::size_t(B * S) && qkv.extent(1) == std::size_t((nh + nkv) * d + nkv * d_v) &&
                      out.extent(0) == std::size_t(B * S) && out.extent(1) == std::size_t(nh * d_v),
                  kernel, "shapes must be qkv[B*S, (nh + nkv)*d + nkv*dv], out[B*S, nh*dv]");
  detail::require(lse.extent(0) == std::size_t(B * nh * S), kernel, "lse must be [B*nh*S]");
  detail::require(doc.size() == 0 || doc.extent(0) == std::size_t(B * S), kernel, "doc must be empty or [B*S]");
  detail::require((qkv.stride(1) == 1 || qkv.extent(1) <= 1) && (out.stride(1) == 1 || out.extent(1) <= 1), kernel,
                  "qkv and out rows must be contiguous");
  FlashShape s{B, S, S, nh, nkv, d, 0};
  s.dv = d_v;
  flash_attention_forward<Exec, T>(exec, s, qkv_heads<const T>(qkv, 0, S, d), qkv_heads<const T>(qkv, nh * d, S, d),
                                   qkv_heads<const T>(qkv, (nh + nkv) * d, S, d_v), qkv_heads<T>(out, 0, S, d_v),
                                   lse.data(), doc.size() ? doc.data() : nullptr);
}

// dqkv [B·S, nh·d + nkv·d + nkv·dv] is overwritten (all three blocks); dout, out [B·S, nh·dv]
// (dv = 0: d). dout may be dqkv's Q block when dv = d: head h's dQ then covers exactly head h's
// dO, which its team has read for the last time. With dv != d head h's dQ columns overlap other
// heads' dO, which other teams may still read: dout must not share dqkv's storage. The
// workspaces (acc_t, overwritten): dq_sum [B·S, nh·d], where dQ is summed over the key blocks;
// delta [B·nh·S], the rows' D.
template <class Exec, class DOV, class QKV, class OV, class LV, class DV, class DQKV, class SV, class WV>
void flash_attention_backward(const Exec& exec, const DOV& dout, const QKV& qkv, const OV& out, const LV& lse,
                              const DQKV& dqkv, const DV& doc, const SV& dq_sum, const WV& delta,
                              const std::int64_t B, const std::int64_t S, const std::int64_t nh,
                              const std::int64_t nkv, const std::int64_t d, const std::int64_t dv = 0) {
  using T = typename DQKV::non_const_value_type;
  using F = kx::acc_t<T>;
  detail::check_view<Exec, DOV, 2>();
  detail::check_view<Exec, QKV, 2>();
  detail::check_view<Exec, DQKV, 2>();
  detail::check_view<Exec, SV, 2>();
  detail::check_view<Exec, WV, 1>();
  static_assert(std::is_same<typename SV::value_type, F>::value && std::is_same<typename WV::value_type, F>::value,
                "tptrain::kernels::flash_attention_backward: dq_sum and delta hold acc_t of the value type");
  const char* kernel = "flash_attention_backward";
  const auto rows = std::size_t(B * S);
  detail::require(dv >= 0, kernel, "need dv >= 0");
  const std::int64_t d_v = dv > 0 ? dv : d;
  detail::require(qkv.extent(0) == rows && dqkv.extent(0) == rows && dout.extent(0) == rows &&
                      out.extent(0) == rows && qkv.extent(1) == std::size_t((nh + nkv) * d + nkv * d_v) &&
                      dqkv.extent(1) == qkv.extent(1) && dout.extent(1) == std::size_t(nh * d_v) &&
                      out.extent(1) == std::size_t(nh * d_v),
                  kernel, "shapes must be dout, out [B*S, nh*dv] and qkv, dqkv [B*S, (nh + nkv)*d + nkv*dv]");
  detail::require(lse.extent(0) == std::size_t(B * nh * S), kernel, "lse must be [B*nh*S]");
  detail::require(doc.size() == 0 || doc.extent(0) == rows, kernel, "doc must be empty or [B*S]");
  detail::require(dq_sum.extent(0) == rows && dq_sum.extent(1) == std::size_t(nh * d) &&
                      (dq_sum.stride(1) == 1 || dq_sum.extent(1) <= 1),
                  kernel, "dq_sum must be [B*S, nh*d] with contiguous rows");
  detail::require(delta.extent(0) == std::size_t(B * nh * S), kernel, "delta must be [B*nh*S]");
  if (d_v != d) {
    const auto* a = reinterpret_cast<const unsigned char*>(dout.data());
    const auto* g = reinterpret_cast<const unsigned char*>(dqkv.data());
    detail::require(a + dout.span() * sizeof(T) <= g || g + dqkv.span() * sizeof(T) <= a, kernel,
                    "with dv != d, dout must not share dqkv's storage");
  }
  FlashShape s{B, S, S, nh, nkv, d, 0};
  s.dv = d_v;
  flash_attention_backward<Exec, T>(exec, s, qkv_heads<const T>(qkv, 0, S, d), qkv_heads<const T>(qkv, nh * d, S, d),
                                    qkv_heads<const T>(qkv, (nh + nkv) * d, S, d_v), qkv_heads<const T>(out, 0, S, d_v),
                                    qkv_heads<const T>(dout, 0, S, d_v), lse.data(),
                                    doc.size() ? doc.data() : nullptr, qkv_heads<T>(dqkv, 0, S, d),
                                    qkv_heads<T>(dqkv, nh * d, S, d), qkv_heads<T>(dqkv, (nh + nkv) * d, S, d_v),
                                    qkv_heads<F>(dq_sum, 0, S, d), delta.data());
}

// Generation with the key/value cache (src/model/kv_cache.hpp): the n rows of qkv
// [n, nh·d + nkv·d + nkv·dv] at positions [p, p + n) of one sequence against the cached keys and
// values [0, p + n) of k_cache [nkv, P, d] and v_cache [nkv, P, dv] (the caches' last extents give
// d and dv; kv_cache_append stored the new rows' first). out [n, nh·dv]; lse [nh·n] is a
// workspace. doc: empty, or [n] the first position of each row's document.
template <class Exec, class QKV, class CV, class OV, class LV, class DV>
void flash_attention_cached_forward(const Exec& exec, const QKV& qkv, const CV& k_cache, const CV& v_cache,
                                    const std::int64_t p, const OV& out, const LV& lse, const DV& doc) {
  using T = typename OV::non_const_value_type;
  detail::check_view<Exec, QKV, 2>();
  detail::check_view<Exec, CV, 3>();
  detail::check_view<Exec, OV, 2>();
  const char* kernel = "flash_attention_cached_forward";
  const std::int64_t n = qkv.extent(0), nkv = k_cache.extent(0), P = k_cache.extent(1), d = k_cache.extent(2),
                     d_v = v_cache.extent(2);
  const std::int64_t nh = detail::cached_query_heads(qkv.extent(1), nkv, d, d_v);
  detail::require(nh > 0 && out.extent(0) == std::size_t(n) && out.extent(1) == std::size_t(nh * d_v) &&
                      v_cache.extent(0) == k_cache.extent(0) && v_cache.extent(1) == k_cache.extent(1),
                  kernel,
                  "shapes must be qkv[n, (nh + nkv)*d + nkv*dv] with nkv dividing nh, k_cache [nkv, P, d], "
                  "v_cache [nkv, P, dv], out[n, nh*dv]");
  detail::require(p >= 0 && p + n <= P, kernel, "positions [p, p + n) must lie inside the cache");
  detail::require(lse.extent(0) >= std::size_t(nh * n), kernel, "lse must hold nh*n values");
  detail::require(doc.size() == 0 || doc.extent(0) == std::size_t(n), kernel, "doc must be empty or [n]");
  FlashShape s{1, n, p + n, nh, nkv, d, p};
  s.dv = d_v;
  const auto cache = [&](const CV& c) {
    return FlashHeads<const T>{c.data(), std::int64_t(c.stride(1)), 0, std::int64_t(c.stride(0))};
  };
  flash_attention_forward<Exec, T>(exec, s, qkv_heads<const T>(qkv, 0, n, d), cache(k_cache), cache(v_cache),
                                   qkv_heads<T>(out, 0, n, d_v), lse.data(), doc.size() ? doc.data() : nullptr);
}

}  // namespace tptrain::kernels
