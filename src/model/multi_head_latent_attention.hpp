// Multi-head latent attention, the "mla" attention kind (DeepSeek-V2 §2.1; DeepSeek-V3; its rows:
// src/model/spec/multi_head_latent_attention_kind.hpp), as Hugging Face's DeepseekV3Attention:
//   c_Q = RMSNorm(x W_qdown)            [n, r_q]   (no latent: q = x W_q)
//   q   = c_Q W_qup                     [N, nh·(d_nope + d_R)], its d_R part of each head rotated
//   c_KV | k_R = x W_kvdown             [n, r_kv + d_R], c_KV through RMSNorm, k_R rotated
//   k_nope | v = c_KV W_kvup            [N, nh·(d_nope + d_v)]
//   head h: q_h · [k_nope_h | k_R] / √(d_nope + d_R) (· YaRN's mscale², DeepSeek-V3), values v_h
//   y   = attention W_o                 [n, H]
// Tensor parallelism over heads (Megatron-Core's MLASelfAttention): the down-projections and their
// norms are replicated, so each rank computes the latents of its rows (sequence parallelism: its
// own n = N/t tokens); the latents enter the column-parallel up-projections through f (its
// identity and backward all-reduce over the tensor group, parallel/mappings.hpp; with sequence
// parallelism the all-gather and reduce-scatter), so the latents' gradients are whole on every
// rank and the replicated weights' gradients are the same everywhere (with sequence parallelism
// each rank's tokens' part, summed over the group as the norms' are: the rows' SP sum). The output
// projection is row-parallel (g). The attention core is grouped-query attention's with nkv = nh
// and value heads of d_v (flash, batched, ring attention with context parallelism), Q, K and V
// packed by kernels::latent_attention_pack.
// Generation caches the latent, [P, r_kv + d_R] per layer (KvCache::latent), not the heads' keys
// and values: each step appends its rows' c_KV and rotated k_R and decompresses the cached
// positions through W_kvup into the stage's shared key/value scratch for the cached flash core.
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kokkos_kernels/attention.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "kokkos_kernels/flash_attention.hpp"
#include "kokkos_kernels/latent_attention.hpp"
#include "kokkos_kernels/rmsnorm.hpp"
#include "src/model/kv_cache.hpp"
#include "src/model/linear.hpp"
#include "src/model/ring_attention.hpp"
#include "src/model/spec/block_descriptor.hpp"
#include "src/model/spec/multi_head_latent_attention_kind.hpp"
#include "src/model/spec/recompute.hpp"
#include "src/model/sublayer.hpp"
#include "src/model/workspace.hpp"
#include "src/util/memory_category.hpp"

namespace tptrain::model {

template <class T>
struct MultiHeadLatentAttention final : AttentionSublayer<T> {
  using Matrix = kernels::Matrix<T>;
  using Acc = kx::acc_t<T>;
  // What forward keeps for backward (the latents of the rank's rows, before and after their norms).
  struct Saved {
    Matrix q_down, q_latent;       // [n, r_q] (empty without the queries' latent)
    kernels::Vector<Acc> q_rstd;   // [n]
    Matrix kv_down, kv_latent;     // [n, r_kv + d_R]: c_KV before and after its norm, then k_R
    kernels::Vector<Acc> kv_rstd;  // [n]
    Matrix qkv_out;                // [N, nh/t·(2d_q + d_v)], q and k_R rotated
    kernels::Vector<Acc> lse;      // [N·nh/t]
    Matrix ctx;                    // [N, nh/t·d_v]
    kernels::Tensor4<T> scores;    // batched, recompute = none only
  };
  Saved make_saved(Workspace<T>& ws, const std::string& name, BufferCategory c = BufferCategory::activation) const {
    Saved v;
    if (q_lora > 0) {
      v.q_down = ws.matrix(name + ".q_down", c, rows, q_lora);
      v.q_latent = ws.matrix(name + ".q_latent", c, rows, q_lora);
      v.q_rstd = ws.template vector<Acc>(name + ".q_norm.rstd", c, rows);
    }
    v.kv_down = ws.matrix(name + ".kv_down", c, rows, kv_lora + heads.rope);
    v.kv_latent = ws.matrix(name + ".kv_latent", c, rows, kv_lora + heads.rope);
    v.kv_rstd = ws.template vector<Acc>(name + ".kv_norm.rstd", c, rows);
    v.qkv_out = ws.matrix(name + ".qkv_out", c, tokens(), heads.packed_width());
    v.lse = ws.template vector<Acc>(name + ".lse", c, tokens() * heads.heads);
    v.ctx = ws.matrix(name + ".ctx", c, tokens(), heads.heads * heads.value);
    if (!flash && recompute == Recompute::none) v.scores = ws.tensor4(name + ".scores", c, B, heads.heads, S, S);
    return v;
  }

  int B, S;
  std::int64_t rows;                // n: the block's rows (N, or N/t with sequence parallelism)
  std::int64_t q_lora, kv_lora;     // r_q (0: no latent), r_kv
  kernels::LatentHeads heads;       // the rank's heads and their widths
  double eps;                       // the latent norms' (kLatentNormEpsilon)
  double q_scale;                   // the softmax's factor beyond 1/√d_q
  bool flash;
  Recompute recompute;
  Parameter<T> q_down, q_norm, q_up;                 // with the queries' latent
  std::optional<ColumnParallelLinear<T>> q;          // without it
  Parameter<T> kv_down, kv_norm, kv_up;
  RowParallelLinear<T> proj;
  Saved saved;
  bool split_sequence;
  Matrix q_latent_all, kv_latent_all;        // [N, ·]: the latents gathered (sequence parallelism)
  Matrix kv_up_out;                          // [N, nh/t·(d_nope + d_v)], then its gradient
  Matrix d_ctx, d_qkv;
  Matrix d_q_latent_all, d_kv_latent_all;    // [N, ·]: the latents' gradients, this rank's heads' part
  Matrix d_q_latent, d_kv_latent;            // [n, ·]: summed over the group (sequence parallelism)
  Matrix d_q_down, d_kv_down;                // [n, ·]: the down-projections' output gradients
  kernels::Matrix<Acc> dq_sum;
  kernels::Vector<Acc> delta;
  kernels::Tensor4<T> probs, dprobs;
  kernels::Matrix<Acc> dkv_sum;
  kernels::Vector<Acc> column_scratch;
  kernels::Tokens doc_start, positions;
  std::unique_ptr<PositionSublayer<T>> position;  // rotary: q's and k_R's d_R features
  RingAttention<T> ring;
  Communicator* context = nullptr;

  MultiHeadLatentAttention(const std::string& name, const GptShape& s, int batch, const Communicator& tp,
                           Workspace<T>& ws, Recompute mode = Recompute::selective, const SavedPlacement& placement = {},
                           std::unique_ptr<PositionSublayer<T>> rotation = nullptr)
      : B(batch), S(s.local_seq_length()), rows(s.sequence_rows(std::int64_t(batch) * s.local_seq_length())),
        q_lora(s.q_lora_rank), kv_lora(s.kv_lora_rank),
        heads{s.local_heads(), s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim}, eps(kLatentNormEpsilon),
        q_scale(latent_attention_softmax_factor(s)), flash(s.flash_attention), recompute(mode),
        kv_down(make_parameter<T>(block_parameter(s, name + "/kv_down/weight"), tp)),
        kv_norm(make_parameter<T>(block_parameter(s, name + "/kv_norm/weight"), tp)),
        kv_up(make_parameter<T>(block_parameter(s, name + "/kv_up/weight"), tp)),
        proj(linear_of<RowParallelLinear<T>>(block_parameter(s, name + "/proj/weight"), std::nullopt, tp)),
        split_sequence(s.splits_sequence()), position(std::move(rotation)) {
    if (!position)
      throw std::logic_error("tptrain: MultiHeadLatentAttention needs rotary positions (its kind's rule)");
    const std::int64_t N = tokens(), latent = kv_lora + heads.rope;
    const ScratchPhase part = ScratchPhase::attention;
    const BufferCategory scratch = BufferCategory::scratch;
    if (q_lora > 0) {
      q_down = make_parameter<T>(block_parameter(s, name + "/q_down/weight"), tp);
      q_norm = make_parameter<T>(block_parameter(s, name + "/q_norm/weight"), tp);
      q_up = make_parameter<T>(block_parameter(s, name + "/q_up/weight"), tp);
    } else {
      q.emplace(block_parameter(s, name + "/q/weight"), tp);
    }
    saved = make_saved(ws, placement.name_for(name), placement.category);
    column_scratch = column_sums_scratch(ws, s, N);
    proj.column_scratch = column_scratch;
    proj.sp = sequence_parallel_buffers(ws, s, N);
    if (q) {
      q->column_scratch = column_scratch;
      q->sp = proj.sp;
    }
    if (split_sequence) {
      if (q_lora > 0) {
        q_latent_all = ws.matrix("attention.q_latent_all", scratch, N, q_lora, part);
        d_q_latent = ws.matrix("attention.d_q_latent", scratch, rows, q_lora, part);
      }
      kv_latent_all = ws.matrix("attention.kv_latent_all", scratch, N, latent, part);
      d_kv_latent = ws.matrix("attention.d_kv_latent", scratch, rows, latent, part);
    }
    kv_up_out = ws.matrix("attention.kv_up", scratch, N, heads.kv_width(), part);
    d_ctx = ws.matrix("attention.d_ctx", scratch, N, heads.heads * heads.value, part);
    d_qkv = ws.matrix("attention.d_qkv", scratch, N, heads.packed_width(), part);
    if (q_lora > 0) {
      d_q_latent_all = ws.matrix("attention.d_q_latent_all", scratch, N, q_lora, part);
      d_q_down = ws.matrix("attention.d_q_down", scratch, rows, q_lora, part);
    }
    d_kv_latent_all = ws.matrix("attention.d_kv_latent_all", scratch, N, latent, part);
    d_kv_down = ws.matrix("attention.d_kv_down", scratch, rows, latent, part);
    if (flash) {
      dq_sum = ws.template matrix<Acc>("attention.dq_sum", scratch, N, heads.heads * heads.qk(), part);
      delta = ws.template vector<Acc>("attention.delta", scratch, N * heads.heads, part);
    } else {
      probs = ws.tensor4("attention.probs", scratch, batch, heads.heads, S, S, part);
      dprobs = ws.tensor4("attention.dprobs_tile", scratch, batch, heads.heads, kernels::attention_backward_tile_rows(S),
                          S, part);
      if constexpr (kx::is_half_v<T>)
        dkv_sum = ws.template matrix<Acc>("attention.dkv_sum", scratch, N, heads.heads * (heads.qk() + heads.value), part);
    }
    if (s.context > 1)
      ring = RingAttention<T>(ContextChunks{0, s.context, s.seq_length}, batch, int(heads.heads), int(heads.heads),
                              int(heads.qk()), ws, int(heads.value));
  }

  std::int64_t tokens() const { return std::int64_t(B) * S; }
  std::vector<Parameter<T>*> parameters() override {  // the kind's rows' order
    std::vector<Parameter<T>*> ps;
    if (q_lora > 0) ps = {&q_down, &q_norm, &q_up};
    else ps = q->parameters();
    for (Parameter<T>* p : {&kv_down, &kv_norm, &kv_up}) ps.push_back(p);
    for (Parameter<T>* p : proj.parameters()) ps.push_back(p);
    return ps;
  }
  void bind_context_group(Communicator& cp) override {
    context = &cp;
    ring.chunks.rank = cp.rank();
  }
  void bind_documents(const kernels::Tokens& starts, const kernels::Tokens& document_positions) override {
    doc_start = starts;
    positions = document_positions;
  }

  // Generation's cache: the latent of `positions` positions; the decompressed keys and values are
  // scratch the stage's blocks share (those of `stage_first`, the stage's first cache, if given).
  KvCache<T> make_cache(const std::string& name, std::int64_t cache_positions,
                        const KvCache<T>* stage_first) const override {
    KvCache<T> c = KvCache<T>::latent_cache(name, cache_positions, kv_lora + heads.rope);
    if (stage_first != nullptr) {
      c.k = stage_first->k;
      c.v = stage_first->v;
      c.expanded = stage_first->expanded;
      return c;
    }
    util::MemoryCategoryScope as(util::MemoryCategory::workspace);
    c.k = decltype(c.k)(name + ".k_expanded", heads.heads, cache_positions, heads.qk());
    c.v = decltype(c.v)(name + ".v_expanded", heads.heads, cache_positions, heads.value);
    c.expanded = Matrix(name + ".kv_up", cache_positions, heads.kv_width());
    return c;
  }

  void forward(const Exec& exec, Communicator& tp, const Matrix& x, const Matrix& y, const bool add_proj_bias = true,
               const CacheStep<T>* step = nullptr) override {
    if (step && split_sequence)
      throw std::logic_error("tptrain: MultiHeadLatentAttention: the cached forward runs without sequence parallelism");
    if (ring.chunks.split() && (step || context == nullptr || positions.size() == 0))
      throw std::logic_error("tptrain: MultiHeadLatentAttention: context parallelism needs the context group and "
                             "every row's global position, and has no cached forward");
    const std::int64_t n_rows = static_cast<std::int64_t>(x.extent(0)), n = step ? n_rows : tokens();
    const Matrix qkv = first_rows(saved.qkv_out, n), ctx = first_rows(saved.ctx, n);
    // The queries, into the packed Q block.
    if (q_lora > 0) {
      const Matrix c_q = first_rows(saved.q_latent, n_rows);
      latent_forward(exec, x, q_down, q_norm, first_rows(saved.q_down, n_rows), c_q, first_rows(saved.q_rstd, n_rows),
                     q_lora);
      const Matrix c_q_all = gathered(exec, tp, c_q, q_latent_all);
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, c_q_all, q_up.value_matrix(), columns(qkv, 0, heads.heads * heads.qk()));
    } else {
      q->forward(exec, tp, x, columns(qkv, 0, heads.heads * heads.qk()));
    }
    // The keys' and values' latent and k_R, then every head's keys and values.
    const Matrix c_kv = first_rows(saved.kv_latent, n_rows);
    latent_forward(exec, x, kv_down, kv_norm, first_rows(saved.kv_down, n_rows), c_kv,
                   first_rows(saved.kv_rstd, n_rows), kv_lora);
    const Matrix c_kv_all = gathered(exec, tp, c_kv, kv_latent_all);
    const Matrix kv = first_rows(kv_up_out, n);
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, columns(c_kv_all, 0, kv_lora), kv_up.value_matrix(), kv);
    }
    if (step) {
      position->rotate(exec, qkv, query_rope(), step->positions, step->position);
      position->rotate(exec, c_kv_all, key_rope(), step->positions, step->position);
    } else {
      position->rotate(exec, qkv, query_rope(), positions);
      position->rotate(exec, c_kv_all, key_rope(), positions);
    }
    {
      PhaseScope phase(Phase::attention);
      kernels::latent_attention_pack(exec, kv, columns(c_kv_all, kv_lora, kv_lora + heads.rope), qkv, heads, q_scale);
      if (step) {
        cached_attention(exec, *step, c_kv_all, qkv, ctx);
      } else if (ring.chunks.split()) {
        ring.forward(exec, *context, saved.qkv_out, saved.ctx, saved.lse, doc_start);
      } else if (flash) {
        kernels::flash_attention_forward(exec, saved.qkv_out, saved.ctx, saved.lse, B, S, heads.heads, heads.heads,
                                         heads.qk(), doc_start, heads.value);
      } else {
        kernels::attention_forward(exec, saved.qkv_out, saved.ctx, probs, saved.lse, B, S, heads.heads, heads.qk(),
                                   saved.scores, dprobs, batched_options());
      }
    }
    proj.forward(exec, tp, ctx, y, add_proj_bias);
  }

  void backward(const Exec& exec, Communicator& tp, const Matrix& dy, const Matrix& x, const Matrix& dx) override {
    proj.backward(exec, tp, dy, saved.ctx, d_ctx);
    {
      PhaseScope phase(Phase::attention);
      if (ring.chunks.split())
        ring.backward(exec, *context, d_ctx, saved.qkv_out, saved.ctx, saved.lse, d_qkv, doc_start, dq_sum, delta);
      else if (flash)
        kernels::flash_attention_backward(exec, d_ctx, saved.qkv_out, saved.ctx, saved.lse, d_qkv, doc_start, dq_sum,
                                          delta, B, S, heads.heads, heads.heads, heads.qk(), heads.value);
      else
        kernels::attention_backward(exec, d_ctx, saved.qkv_out, saved.lse, d_qkv, probs, dprobs, dkv_sum, saved.scores,
                                    batched_options());
      kernels::latent_attention_unpack(exec, d_qkv, kv_up_out, columns(d_kv_latent_all, kv_lora, kv_lora + heads.rope),
                                       heads, q_scale);
    }
    position->rotate_backward(exec, d_qkv, query_rope(), positions);
    position->rotate_backward(exec, d_kv_latent_all, key_rope(), positions);
    // The up-projections: their weight gradients from the latents of all N tokens (gathered again
    // with sequence parallelism, as Megatron's column-parallel layers do), the latents' gradients
    // this rank's heads' part, summed over the group by f's backward.
    const auto d_q = columns(d_qkv, 0, heads.heads * heads.qk());
    const Matrix c_kv_all = gathered(exec, tp, saved.kv_latent, kv_latent_all);
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_backward_input(exec, kv_up_out, kv_up.value_matrix(), columns(d_kv_latent_all, 0, kv_lora));
      kernels::linear_backward_weight(exec, kv_up_out, columns(c_kv_all, 0, kv_lora), kv_up.grad_matrix());
    }
    if (q_lora > 0) {
      const Matrix c_q_all = gathered(exec, tp, saved.q_latent, q_latent_all);
      PhaseScope phase(Phase::gemm);
      kernels::linear_backward_input(exec, d_q, q_up.value_matrix(), d_q_latent_all);
      kernels::linear_backward_weight(exec, d_q, c_q_all, q_up.grad_matrix());
    }
    const Matrix d_c_kv = summed(exec, tp, d_kv_latent_all, d_kv_latent);
    latent_backward(exec, d_c_kv, x, kv_down, kv_norm, saved.kv_down, saved.kv_rstd, d_kv_down, kv_lora);
    PhaseScope phase(Phase::gemm);
    if (q_lora > 0) {
      const Matrix d_c_q = summed(exec, tp, d_q_latent_all, d_q_latent);
      latent_backward(exec, d_c_q, x, q_down, q_norm, saved.q_down, saved.q_rstd, d_q_down, q_lora);
      kernels::linear_backward_input(exec, d_q_down, q_down.value_matrix(), dx);
    } else {
      q->backward(exec, tp, d_q, x, dx);  // its f: dx whole on every rank
    }
    kernels::linear_backward_input(exec, d_kv_down, kv_down.value_matrix(), dx, /*accumulate=*/true);
  }

  std::shared_ptr<SublayerSaved> saved_set() const override { return box_saved(saved); }
  std::shared_ptr<SublayerSaved> make_saved_set(Workspace<T>& ws, const std::string& prefix,
                                                BufferCategory c) const override {
    return box_saved(make_saved(ws, prefix, c));
  }
  void bind(const std::shared_ptr<SublayerSaved>& s) override { saved = unbox_saved<Saved>(s); }

 private:
  static auto columns(const Matrix& m, std::int64_t first, std::int64_t last) {
    return Kokkos::subview(m, Kokkos::ALL(), std::make_pair(first, last));
  }
  // The rotated features: the last d_R of each query head; k_R, after c_KV in the latent.
  kernels::RotaryHeads query_rope() const { return {heads.heads, heads.qk(), heads.nope}; }
  kernels::RotaryHeads key_rope() const { return {1, kv_lora + heads.rope, kv_lora}; }
  kernels::AttentionOptions batched_options() const {
    return {heads.heads, doc_start.size() > 0 ? doc_start.data() : nullptr, heads.value};
  }

  // A latent of the rank's rows: down = x W_down [rows, width + ·], latent = RMSNorm of its first
  // `width` columns (the rest, k_R, copied).
  void latent_forward(const Exec& exec, const Matrix& x, const Parameter<T>& w_down, const Parameter<T>& norm,
                      const Matrix& down, const Matrix& latent, const kernels::Vector<Acc>& rstd,
                      std::int64_t width) const {
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, x, w_down.value_matrix(), down);
    }
    PhaseScope phase(Phase::norms_elementwise);
    kernels::rmsnorm_forward(exec, columns(down, 0, width), norm.value_vector(), columns(latent, 0, width), rstd,
                             Acc(eps));
    if (std::int64_t(down.extent(1)) > width)
      kernels::copy(exec, columns(down, width, down.extent(1)), columns(latent, width, down.extent(1)));
  }
  // Its backward from the latent's gradient d_latent [rows, ·] (whole): d_down, the norm's and
  // W_down's gradients.
  void latent_backward(const Exec& exec, const Matrix& d_latent, const Matrix& x, Parameter<T>& w_down,
                       Parameter<T>& norm, const Matrix& down, const kernels::Vector<Acc>& rstd, const Matrix& d_down,
                       std::int64_t width) const {
    {
      PhaseScope phase(Phase::norms_elementwise);
      const auto dy = columns(d_latent, 0, width), in = columns(down, 0, width), d_in = columns(d_down, 0, width);
      if (holds_column_sums(column_scratch, d_latent.extent(0), width, 1))
        kernels::rmsnorm_backward(exec, dy, in, norm.value_vector(), rstd, d_in, norm.grad_vector(), column_scratch);
      else
        kernels::rmsnorm_backward(exec, dy, in, norm.value_vector(), rstd, d_in, norm.grad_vector());
      if (std::int64_t(d_down.extent(1)) > width)
        kernels::copy(exec, columns(d_latent, width, d_latent.extent(1)), columns(d_down, width, d_down.extent(1)));
    }
    PhaseScope phase(Phase::gemm);
    kernels::linear_backward_weight(exec, d_down, x, w_down.grad_matrix());
  }

  // f on a latent [rows, ·]: with sequence parallelism all N tokens' gathered into `all`; else
  // the latent itself.
  Matrix gathered(const Exec& exec, Communicator& tp, const Matrix& latent, const Matrix& all) const {
    if (!split_sequence) {
      parallel::copy_to_tp_region_forward(tp, exec, latent);
      return latent;
    }
    parallel::gather_from_sequence_parallel_region_forward(tp, exec, latent, all);
    return all;
  }
  // f's backward: the heads' parts of a latent's gradient summed over the group, in place, or
  // reduce-scattered to the rank's tokens (`mine`).
  Matrix summed(const Exec& exec, Communicator& tp, const Matrix& part, const Matrix& mine) const {
    PhaseScope phase(Phase::tp_comm);
    if (!split_sequence) {
      parallel::copy_to_tp_region_backward(tp, exec, part);
      return part;
    }
    parallel::gather_from_sequence_parallel_region_backward_start(tp, exec, part, mine).wait_on(exec);
    return mine;
  }

  // A generation step: its rows' latents appended to the cache, the cached positions
  // decompressed, and flash attention of the rows over them.
  void cached_attention(const Exec& exec, const CacheStep<T>& step, const Matrix& c_kv, const Matrix& qkv,
                        const Matrix& ctx) {
    KvCache<T>& cache = *step.cache;
    const std::int64_t n = qkv.extent(0), p = step.position, m = p + n;
    kernels::copy(exec, first_rows(c_kv, n), Kokkos::subview(cache.latent, std::make_pair(p, m), Kokkos::ALL()));
    const Matrix cached = first_rows(cache.latent, m), kv = first_rows(cache.expanded, m);
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, columns(cached, 0, kv_lora), kv_up.value_matrix(), kv);
    }
    kernels::latent_attention_expand(exec, kv, columns(cached, kv_lora, kv_lora + heads.rope), cache.k, cache.v, heads);
    kernels::flash_attention_cached_forward(exec, qkv, cache.k, cache.v, p, ctx, saved.lse, step.doc_start);
  }
};

}  // namespace tptrain::model
