// Megatron ParallelAttention, the grouped-query attention kind (model.attention = "gqa"): QKV
// column-parallel with whole heads per rank (the QKV weight's Q, K and V row blocks are each
// split over the TP group, so a rank holds Q, K and V of its heads), causal attention of the local
// heads with no communication, output projection row-parallel (its all-reduce is g). Its
// parameters are its kind's rows (src/model/spec/grouped_query_attention_kind.hpp) at the block's
// attention place: "<block>/attn/qkv/weight", ...
// By the block specification: the biases it holds; q and k of the QKV output rotated by the
// position kind when it acts here (rotary positions). The attention core is one of two
// (GptShape::flash_attention, the deck's training.attention; docs/design.md, "Attention"):
//   flash    kokkos_kernels/flash_attention.hpp: tiled, online softmax, no S×S buffer; grouped-
//            query attention reads the rank's nkv/t key/value heads in place; document masks;
//            the same kernel serves the cached generation step
//   batched  kokkos_kernels/attention.hpp's batched GEMMs over [B, nh/t, S, S] scores (the CUDA
//            default until measured): the same operands, grouped-query attention's key/value heads
//            read in place through the GEMMs' pointer tables, and document masks in its softmax
// With context parallelism (GptShape::context > 1) the rank holds two chunks of each sequence and
// the core is ring attention over the context group (src/model/ring_attention.hpp), flash
// attention per block; its rows' positions (rotary angles, causality) are global.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kokkos_kernels/attention.hpp"
#include "kokkos_kernels/flash_attention.hpp"
#include "kokkos_kernels/kv_cache_append.hpp"
#include "src/model/spec/block_descriptor.hpp"
#include "src/model/spec/grouped_query_attention_kind.hpp"
#include "src/model/spec/gpt_shape.hpp"
#include "src/model/kv_cache.hpp"
#include "src/model/linear.hpp"
#include "src/model/spec/recompute.hpp"
#include "src/model/ring_attention.hpp"
#include "src/model/sublayer.hpp"
#include "src/model/workspace.hpp"

namespace tptrain::model {

template <class T>
struct ParallelAttention final : AttentionSublayer<T> {
  using Matrix = kernels::Matrix<T>;
  // What forward keeps for backward (src/model/spec/recompute.hpp).
  struct Saved {
    kernels::Matrix<T> qkv_out;         // [N, (nh + 2nkv)/tp * d] (q and k rotated, where positions rotate)
    kernels::Vector<kx::acc_t<T>> lse;  // [B*nh/tp*S] log Σ exp of each score row (the softmax's normaliser), fp32
    kernels::Matrix<T> ctx;             // [N, H/tp] attention output before proj
    kernels::Tensor4<T> scores;         // batched, recompute = none only: [B, nh/tp, S, S] raw Q Kᵀ (else empty)
  };
  Saved make_saved(Workspace<T>& ws, const std::string& name, BufferCategory c = BufferCategory::activation) const {
    Saved s{ws.matrix(name + ".qkv_out", c, tokens(), (std::int64_t(nh_local) + 2 * nkv_local) * d),
            ws.template vector<kx::acc_t<T>>(name + ".lse", c, tokens() * nh_local),
            ws.matrix(name + ".ctx", c, tokens(), std::int64_t(nh_local) * d),
            {}};
    if (!flash && recompute == Recompute::none) s.scores = ws.tensor4(name + ".scores", c, B, nh_local, S, S);
    return s;
  }

  ColumnParallelLinear<T> qkv;  // H -> 3H, 3 blocks
  RowParallelLinear<T> proj;    // H -> H
  int B, S, nh_local, d;
  int nkv_local;                // key/value heads of this rank (= nh_local without grouped-query attention)
  bool flash;                   // the attention core (GptShape::flash_attention)
  Recompute recompute;
  Saved saved;                  // the set of the micro-batch being computed (the owner may rebind it)
  kernels::Matrix<T> d_qkv;     // [N, (nh + 2nkv)/tp * d]; its Q block holds dO first
  // Flash: dQ summed in fp32 over the key blocks (rounded once into d_qkv), and each row's
  // D = Σ dO ∘ O (kernels::flash_attention_backward's workspaces).
  kernels::Matrix<kx::acc_t<T>> dq_sum;  // [N, nh/tp * d]
  kernels::Vector<kx::acc_t<T>> delta;   // [B * nh/tp * S]
  // The micro-batch's documents, set by the model (GptModel::bind_documents; empty: none):
  // data.document_mask, the first position of each token's document [N]; data.reset_positions,
  // each token's position in its document [N] (the rotary angle's position).
  kernels::Tokens doc_start, positions;
  // The batched core's buffers, shared by every layer of the stage: with recompute = selective
  // or full the probabilities are not kept from forward to backward but recomputed there from Q,
  // K and lse (one QKᵀ GEMM), and the backward walks query row tiles, so a stage holds one
  // [B, nh/tp, S, S] buffer plus one [B, nh/tp, tile, S] row-tile buffer (tile =
  // kernels::attention_backward_tile_rows(S), min(S, 128)) instead of score buffers per layer.
  kernels::Tensor4<T> probs;    // [B, nh/tp, S, S] scores / probabilities
  kernels::Tensor4<T> dprobs;   // [B, nh/tp, tile, S] their gradient, one row tile (backward)
  // bf16/fp16 only: dK and dV summed over the backward's query row tiles and the group's query
  // heads in fp32, rounded once.
  kernels::Matrix<kx::acc_t<T>> dkv_sum;  // [N, 2 * nkv/tp * d]
  // The position kind's part in the attention (transformer_layer.hpp, make_position): q and k
  // rotated (RoPE); null: positions act elsewhere (the embedding).
  std::unique_ptr<PositionSublayer<T>> position;
  // Context parallelism: the ring (its buffers and this rank's chunks) and the context group
  // (bind_context); with it `positions` holds every row's global position.
  RingAttention<T> ring;
  Communicator* context = nullptr;
  void bind_context_group(Communicator& cp) override {
    context = &cp;
    ring.chunks.rank = cp.rank();
  }
  void bind_documents(const kernels::Tokens& starts, const kernels::Tokens& document_positions) override {
    doc_start = starts;
    positions = document_positions;
  }
  // The rank's key/value heads' K and V.
  KvCache<T> make_cache(const std::string& name, std::int64_t cache_positions, const KvCache<T>*) const override {
    return KvCache<T>(name, nkv_local, cache_positions, d);
  }

  // `rotation`: the position kind's part in the attention (null: none).
  ParallelAttention(const std::string& name, const GptShape& s, int batch, const Communicator& tp, Workspace<T>& ws,
                    Recompute mode = Recompute::selective, const SavedPlacement& placement = {},
                    std::unique_ptr<PositionSublayer<T>> rotation = nullptr)
      : qkv(linear_of<ColumnParallelLinear<T>>(block_parameter(s, name + "/qkv/weight"),
                                                block_parameter_if_held(s, name + "/qkv/bias"), tp)),
        proj(linear_of<RowParallelLinear<T>>(block_parameter(s, name + "/proj/weight"),
                                             block_parameter_if_held(s, name + "/proj/bias"), tp)),
        B(batch), S(s.local_seq_length()), nh_local(s.local_heads()), d(s.head_dim()), nkv_local(s.local_kv_heads()),
        flash(s.flash_attention), recompute(mode),
        saved(make_saved(ws, placement.name_for(name), placement.category)),
        position(std::move(rotation)) {
    qkv.column_scratch = proj.column_scratch = column_sums_scratch(ws, s, tokens());
    qkv.sp = proj.sp = sequence_parallel_buffers(ws, s, tokens());
    const ScratchPhase part = ScratchPhase::attention;  // shares its memory with the MLP's scratch
    d_qkv = ws.matrix("attention.d_qkv", BufferCategory::scratch, tokens(), s.local_qkv_width(), part);
    if (flash) {
      dq_sum = ws.template matrix<kx::acc_t<T>>("attention.dq_sum", BufferCategory::scratch, tokens(),
                                                std::int64_t(nh_local) * d, part);
      delta = ws.template vector<kx::acc_t<T>>("attention.delta", BufferCategory::scratch, tokens() * nh_local, part);
    } else {
      probs = ws.tensor4("attention.probs", BufferCategory::scratch, batch, nh_local, S, S, part);
      dprobs = ws.tensor4("attention.dprobs_tile", BufferCategory::scratch, batch, nh_local,
                          kernels::attention_backward_tile_rows(S), S, part);
      if constexpr (kx::is_half_v<T>)
        dkv_sum = ws.template matrix<kx::acc_t<T>>("attention.dkv_sum", BufferCategory::scratch, tokens(),
                                                   2 * std::int64_t(nkv_local) * d, part);
    }
    if (s.context > 1)
      ring = RingAttention<T>(ContextChunks{0, s.context, s.seq_length}, batch, nh_local, nkv_local, d, ws);
  }

  std::int64_t tokens() const { return std::int64_t(B) * S; }
  std::vector<Parameter<T>*> parameters() override {
    std::vector<Parameter<T>*> ps = qkv.parameters();
    for (Parameter<T>* p : proj.parameters()) ps.push_back(p);
    return ps;
  }

  // add_proj_bias = false: y is left without the output projection's bias, which the caller
  // fuses into its residual add (TransformerLayer).
  // With a cache step (generation, kv_cache.hpp) x holds n new rows of one sequence at positions
  // [p, p + n): the same projections, computed in the leading rows of the layer's buffers, with
  // q and k rotated at their positions, K and V appended to the cache and flash attention of the
  // n rows over the cached [0, p + n) (whatever the training core; its lse in saved.lse).
  void forward(const Exec& exec, Communicator& tp, const Matrix& x /*[N or n, H]*/, const Matrix& y /*[N or n, H]*/,
               const bool add_proj_bias = true, const CacheStep<T>* step = nullptr) override {
    if (step && qkv.sp.enabled())
      throw std::logic_error("tptrain: ParallelAttention: the cached forward runs without sequence parallelism");
    if (ring.chunks.split() && (step || context == nullptr || positions.size() == 0))
      throw std::logic_error("tptrain: ParallelAttention: context parallelism needs the context group and every "
                             "row's global position, and has no cached forward");
    const std::int64_t n = step ? static_cast<std::int64_t>(x.extent(0)) : tokens();
    const kernels::Matrix<T> qkv_out = first_rows(saved.qkv_out, n), ctx = first_rows(saved.ctx, n);
    qkv.forward(exec, tp, x, qkv_out);
    if (position) {
      if (step) position->rotate(exec, qkv_out, nh_local + nkv_local, step->positions, step->position);
      else position->rotate(exec, qkv_out, nh_local + nkv_local, positions);
    }
    {
      PhaseScope phase(Phase::attention);
      if (step) {
        kernels::kv_cache_append(exec, qkv_out, step->cache->k, step->cache->v, step->position);
        kernels::flash_attention_cached_forward(exec, qkv_out, step->cache->k, step->cache->v, step->position, ctx,
                                                saved.lse, step->doc_start);
      } else if (ring.chunks.split()) {
        ring.forward(exec, *context, saved.qkv_out, saved.ctx, saved.lse, doc_start);
      } else if (flash) {
        kernels::flash_attention_forward(exec, saved.qkv_out, saved.ctx, saved.lse, B, S, nh_local, nkv_local, d,
                                         doc_start);
      } else {
        // dprobs, free during a forward, holds the batched path's GEMM pointer tables.
        kernels::attention_forward(exec, saved.qkv_out, saved.ctx, probs, saved.lse, B, S, nh_local, d, saved.scores,
                                   dprobs, batched_options());
      }
    }
    proj.forward(exec, tp, ctx, y, add_proj_bias);
  }

  void backward(const Exec& exec, Communicator& tp, const Matrix& dy, const Matrix& x, const Matrix& dx) override {
    // The context gradient dO goes to d_qkv's Q block (no buffer of its own): both cores read
    // each query block of dO before they write its dQ, and with dO at the leading dimension of
    // Q, K and V the batched path pairs its GEMMs (attention_batched.hpp).
    const auto d_ctx = Kokkos::subview(d_qkv, Kokkos::ALL(), std::make_pair(std::int64_t(0), std::int64_t(nh_local) * d));
    proj.backward(exec, tp, dy, saved.ctx, d_ctx);
    {
      PhaseScope phase(Phase::attention);
      if (ring.chunks.split())
        ring.backward(exec, *context, d_ctx, saved.qkv_out, saved.ctx, saved.lse, d_qkv, doc_start, dq_sum, delta);
      else if (flash)
        kernels::flash_attention_backward(exec, d_ctx, saved.qkv_out, saved.ctx, saved.lse, d_qkv, doc_start, dq_sum,
                                          delta, B, S, nh_local, nkv_local, d);
      else  // recompute = none: saved.scores holds Q Kᵀ, and the backward skips that GEMM
        kernels::attention_backward(exec, d_ctx, saved.qkv_out, saved.lse, d_qkv, probs, dprobs, dkv_sum,
                                    saved.scores, batched_options());
    }
    if (position) position->rotate_backward(exec, d_qkv, nh_local + nkv_local, positions);
    qkv.backward(exec, tp, d_qkv, x, dx);
  }

  const Parameter<T>* output_bias() const override { return proj.has_bias ? &proj.bias : nullptr; }

  std::shared_ptr<SublayerSaved> saved_set() const override { return box_saved(saved); }
  std::shared_ptr<SublayerSaved> make_saved_set(Workspace<T>& ws, const std::string& prefix,
                                                BufferCategory c) const override {
    return box_saved(make_saved(ws, prefix, c));
  }
  void bind(const std::shared_ptr<SublayerSaved>& s) override { saved = unbox_saved<Saved>(s); }

 private:
  kernels::AttentionOptions batched_options() const {
    return {nkv_local, doc_start.size() > 0 ? doc_start.data() : nullptr};
  }
};

}  // namespace tptrain::model
