// Ring attention (Liu et al. 2023; Megatron-Core's context parallelism): the attention core of a
// context-parallel rank (parallel.context = C > 1; docs/design.md, "Context parallelism"). The
// rank holds two chunks of each sequence (base/context_chunks.hpp: chunks r and 2C − 1 − r, c
// tokens each), the queries, keys and values of its tensor-parallel heads for them. Its keys and
// values travel around the context group's ring, C steps: at step i the rank holds the block of
// rank j = r − i (mod C) and computes its query chunks against that block's key chunks with flash
// attention at their global positions (kokkos_kernels/flash_attention.hpp, resume mode), merging
// each partial result into O and lse through the online-softmax statistics (exact: the merge of
// two softmaxes over disjoint keys). The next block's transfer (send to r + 1, receive from
// r − 1) runs during the step's blocks.
//
// Causality by chunk: query chunk q sees key chunk k < q whole, k = q causally, k > q not at all.
// With the load-balanced chunks, a remote block j < r: both query chunks against key chunk j (the
// other key chunk, 2C − 1 − j, is after both); j > r: the second query chunk, 2C − 1 − r, against
// both key chunks. So every step after the first computes two c × c blocks, the first step (own
// block) two causal diagonals and one full block: the work is even over the ranks. Masked chunk pairs are not computed; every
// block travels the whole ring, since some rank needs each of its chunks.
//
// Backward: D = Σ dO ∘ O per row once; the same ring of K and V, and with each block its dK and
// dV sums (acc_t), which every rank adds its queries' part to and passes on: after C steps a
// block's sums arrive back at its owner (one more transfer than the keys make). The next block's
// K and V travel during the step's blocks; the sums travel after them, during the next step's.
// dQ is summed over the steps in dq_sum (acc_t) and rounded once.
//
// Grouped-query attention moves the rank's nkv key/value heads only; multi-head latent attention's
// value heads of their own width dv (kokkos_kernels/flash_attention.hpp) travel as they are. Document masks use each
// row's global document start (a document may begin in another rank's chunk). The order of
// posts, computes and waits is src/schedule/ring_schedule.hpp's, which
// tests/schedule/ring_simulator proves deadlock-free: MPI isend/irecv matched by tag; NCCL one
// group (send and receive) per transfer on the context group's own stream, posted in the same
// order on every rank (no lanes: a lane's transfers cannot be grouped, and a ring's must be).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "base/context_chunks.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "kokkos_kernels/flash_attention.hpp"
#include "src/model/workspace.hpp"
#include "src/parallel/collectives.hpp"
#include "src/schedule/ring_schedule.hpp"
#include "src/util/phases.hpp"

namespace tptrain::model {

using Exec = kx::ExecSpace;  // as the layers (linear.hpp)
using parallel::Communicator;
using util::Phase;
using util::PhaseScope;

template <class T>
struct RingAttention {
  using F = kx::acc_t<T>;
  static constexpr int kv_tag = 1, sums_tag = 2;

  ContextChunks chunks;  // the rank's chunks: its rank and the size C of the context group it rings over, S
  int B = 0, nh = 0, nkv = 0, d = 0, dv = 0;  // dv: the value heads' width (d but in MLA)
  kernels::Matrix<T> kv[2];    // [N, nkv (d + dv)]: K then V of the block held, and of the one arriving
  kernels::Matrix<F> o_sum;    // [N, nh dv]: the merged output (forward)
  kernels::Matrix<F> dkv[2];   // [N, nkv (d + dv)]: this step's dK, dV sums of the block held (two: one may still be sent)
  kernels::Matrix<F> dkv_in;   // [N, nkv (d + dv)]: the sums arriving from the previous rank

  RingAttention() = default;
  RingAttention(const ContextChunks& c, int batch, int heads, int kv_heads, int head_dim, Workspace<T>& ws,
                int value_dim = 0)
      : chunks(c), B(batch), nh(heads), nkv(kv_heads), d(head_dim), dv(value_dim > 0 ? value_dim : head_dim) {
    const std::int64_t N = std::int64_t(B) * c.local(), kvw = std::int64_t(nkv) * (d + dv);
    const ScratchPhase part = ScratchPhase::attention;
    kv[0] = ws.matrix("ring.kv_0", BufferCategory::scratch, N, kvw, part);
    kv[1] = ws.matrix("ring.kv_1", BufferCategory::scratch, N, kvw, part);
    o_sum = ws.template matrix<F>("ring.o_sum", BufferCategory::scratch, N, std::int64_t(nh) * dv, part);
    dkv[0] = ws.template matrix<F>("ring.dkv_0", BufferCategory::scratch, N, kvw, part);
    dkv[1] = ws.template matrix<F>("ring.dkv_1", BufferCategory::scratch, N, kvw, part);
    dkv_in = ws.template matrix<F>("ring.dkv_in", BufferCategory::scratch, N, kvw, part);
  }

  // ctx [N, nh dv] and lse (chunk-major: [2][B][nh][c], the ring backward's layout) from the QKV
  // output [N, (nh + nkv) d + nkv dv]; doc: empty, or each row's global document start [N].
  template <class QKV, class OV, class LV, class DV>
  void forward(const Exec& exec, Communicator& cp, const QKV& qkv, const OV& ctx, const LV& lse, const DV& doc) {
    const int C = chunks.size, r = chunks.rank;  // the context group's (cp's)
    {
      PhaseScope phase(Phase::attention);
      kernels::fill(exec, o_sum, F(0));
      kernels::fill(exec, lse, -kx::infinity<F>());
      pack_kv(exec, qkv, kv[0]);
    }
    Groups groups;
    for (const schedule::RingOp& op : schedule::ring_forward_ops(C)) {
      if (op.kind == schedule::RingOp::compute) {
        PhaseScope phase(Phase::attention);
        const kernels::Matrix<T>& block = kv[op.step % 2];
        for_each_block((r - op.step + C) % C, [&](int qh, int kh, const kernels::FlashShape& s) {
          kernels::flash_attention_forward<Exec, T, F>(exec, s, query(qkv, qh), key(block, kh), value(block, kh),
                                                       o_heads(o_sum, qh), lse_of(lse, qh), doc_of(doc, qh),
                                                       /*resume=*/true);
          parallel::progress(cp);
        });
      } else {
        transfer(exec, cp, op, groups);
      }
    }
    PhaseScope phase(Phase::attention);
    kernels::convert(exec, o_sum, ctx);
  }

  // d_qkv [N, (nh + nkv) d + nkv dv] from dO (d_ctx, which may be d_qkv's Q block when dv = d), the
  // forward's qkv, ctx and lse; dq_sum [N, nh d] and delta [B nh 2c] (acc_t) are workspaces.
  template <class DOV, class QKV, class OV, class LV, class DV, class DQKV, class SV, class WV>
  void backward(const Exec& exec, Communicator& cp, const DOV& d_ctx, const QKV& qkv, const OV& ctx, const LV& lse,
                const DQKV& d_qkv, const DV& doc, const SV& dq_sum, const WV& delta) {
    const int C = chunks.size, r = chunks.rank;  // the context group's (cp's)
    const std::int64_t c = chunks.chunk();
    {
      PhaseScope phase(Phase::attention);
      for (int qh = 0; qh < 2; ++qh) {
        const kernels::FlashShape s{B, c, c, nh, nkv, d, 0, 0, 0, dv};
        kernels::flash_attention_delta<Exec, T>(exec, s, heads<const T>(ctx, qh, 0, dv), heads<const T>(d_ctx, qh, 0, dv),
                                                delta.data() + qh * std::int64_t(B) * nh * c);
      }
      kernels::fill(exec, dq_sum, F(0));
      pack_kv(exec, qkv, kv[0]);
    }
    Groups groups;
    for (const schedule::RingOp& op : schedule::ring_backward_ops(C)) {
      if (op.kind == schedule::RingOp::compute) {
        PhaseScope phase(Phase::attention);
        const kernels::Matrix<T>& block = kv[op.step % 2];
        const kernels::Matrix<F>& mine = dkv[op.step % 2];
        kernels::fill(exec, mine, F(0));
        for_each_block((r - op.step + C) % C, [&](int qh, int kh, const kernels::FlashShape& s) {
          kernels::flash_attention_backward<Exec, T, F>(
              exec, s, query(qkv, qh), key(block, kh), value(block, kh), query(qkv, qh),
              heads<const T>(d_ctx, qh, 0, dv), lse_of(lse, qh), doc_of(doc, qh), kernels::FlashHeads<T>{},
              heads<F>(mine, kh, 0, d), heads<F>(mine, kh, std::int64_t(nkv) * d, dv), heads<F>(dq_sum, qh, 0, d),
              delta.data() + qh * std::int64_t(B) * nh * c, /*accumulate=*/true);
          parallel::progress(cp);
        });
      } else if (op.kind == schedule::RingOp::add_sums) {
        PhaseScope phase(Phase::attention);
        kernels::add_inplace(exec, dkv[op.step % 2], dkv_in);  // the block's sums from the ranks before
      } else {
        transfer(exec, cp, op, groups);
      }
    }
    PhaseScope phase(Phase::attention);  // dkv_in: this rank's own block's sums, complete
    const std::int64_t qw = std::int64_t(nh) * d, w = qw + std::int64_t(nkv) * (d + dv);
    kernels::convert(exec, dkv_in, Kokkos::subview(d_qkv, Kokkos::ALL(), std::make_pair(qw, w)));
    kernels::convert(exec, dq_sum, Kokkos::subview(d_qkv, Kokkos::ALL(), std::make_pair(std::int64_t(0), qw)));
  }

 private:
  // The chunk pairs of the rank's query chunks and block j's key chunks that causality leaves,
  // as flash shapes at their global positions: f(query half, key half, shape).
  template <class Fn>
  void for_each_block(int j, Fn&& f) const {
    const std::int64_t c = chunks.chunk();
    for (int qh = 0; qh < 2; ++qh)
      for (int kh = 0; kh < 2; ++kh) {
        const int qc = chunks.global_chunk(qh), kc = chunks.global_chunk(kh, j);
        if (kc > qc) continue;
        kernels::FlashShape s{B, c, c, nh, nkv, d, 0, 0, 0, dv};
        s.q0 = qc * c;
        s.k0 = kc * c;
        s.doc_stride = 2 * c;
        f(qh, kh, s);
      }
  }

  // Heads of `width` features from column `first` of half `half` of a [N, ·] matrix's rows: row
  // (b, i) of the half is row b·2c + half·c + i.
  template <class U, class V>
  kernels::FlashHeads<U> heads(const V& m, int half, std::int64_t first, std::int64_t width) const {
    const std::int64_t ld = m.stride(0), c = chunks.chunk();
    return {const_cast<U*>(m.data()) + half * c * ld + first, ld, 2 * c * ld, width};
  }
  template <class QKV>
  kernels::FlashHeads<const T> query(const QKV& qkv, int half) const { return heads<const T>(qkv, half, 0, d); }
  kernels::FlashHeads<const T> key(const kernels::Matrix<T>& block, int half) const {
    return heads<const T>(block, half, 0, d);
  }
  kernels::FlashHeads<const T> value(const kernels::Matrix<T>& block, int half) const {
    return heads<const T>(block, half, std::int64_t(nkv) * d, dv);
  }
  kernels::FlashHeads<F> o_heads(const kernels::Matrix<F>& o, int half) const { return heads<F>(o, half, 0, dv); }
  template <class LV>
  F* lse_of(const LV& lse, int half) const {
    return lse.data() + half * std::int64_t(B) * nh * chunks.chunk();
  }
  template <class DV>
  const std::int32_t* doc_of(const DV& doc, int half) const {
    return doc.size() > 0 ? doc.data() + half * chunks.chunk() : nullptr;
  }

  // K and V of the rank's own block, contiguous: what travels the ring.
  template <class QKV>
  void pack_kv(const Exec& exec, const QKV& qkv, const kernels::Matrix<T>& block) const {
    const std::int64_t qw = std::int64_t(nh) * d;
    kernels::copy(exec, Kokkos::subview(qkv, Kokkos::ALL(), std::make_pair(qw, qw + std::int64_t(nkv) * (d + dv))), block);
  }

  // A post or a wait of the schedule (src/schedule/ring_schedule.hpp). A post sends to the next
  // rank of the ring and receives from the previous one, as one group (NCCL: both progress
  // together, so the ring cannot wait on itself): the kv flow the block held into the other kv
  // buffer, the sums flow this step's dK, dV sums into dkv_in. A wait is the exposed part of the
  // transfer: cp_comm.
  using Groups = std::vector<std::vector<parallel::Request>>;
  void transfer(const Exec& exec, Communicator& cp, const schedule::RingOp& op, Groups& groups) {
    const auto g = static_cast<std::size_t>(op.group);
    if (op.kind == schedule::RingOp::wait) {
      PhaseScope phase(Phase::cp_comm);
      parallel::wait_all_on(groups[g].data(), groups[g].size(), exec);
      return;
    }
    if (groups.size() <= g) groups.resize(g + 1);
    const int C = chunks.size, next = (chunks.rank + 1) % C, prev = (chunks.rank + C - 1) % C;
    std::vector<parallel::Request>& r = groups[g];
    cp.group_start(exec);
    if (op.flow == schedule::RingFlow::kv) {
      r.push_back(parallel::isend(cp, exec, kv[op.step % 2], next, kv_tag));
      r.push_back(parallel::irecv(cp, exec, kv[(op.step + 1) % 2], prev, kv_tag));
    } else {
      r.push_back(parallel::isend(cp, exec, dkv[op.step % 2], next, sums_tag));
      r.push_back(parallel::irecv(cp, exec, dkv_in, prev, sums_tag));
    }
    r.push_back(cp.group_end());
  }
};

}  // namespace tptrain::model
