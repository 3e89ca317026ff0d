#include "src/plan/block_time.hpp"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>

#include "src/model/model_flops.hpp"
#include "src/plan/gemm_efficiency.hpp"
#include "src/schedule/ring_schedule.hpp"

namespace tptrain::plan {

const char* stream_name(Stream s) {
  switch (s) {
    case Stream::compute: return "compute";
    case Stream::tensor: return "tensor-parallel";
    case Stream::context: return "context-parallel";
    case Stream::expert: return "expert-parallel";
    case Stream::pipeline: return "pipeline";
    case Stream::data: return "data-parallel";
  }
  return "";
}

void Pass::add(const char* name, Stream s, double t) {
  if (t <= 0) return;
  kernels.push_back(Kernel{name, s, t});
  on[static_cast<std::size_t>(s)] += t;
  seconds += t;
}

void Pass::append(const Pass& other) {
  for (const Kernel& k : other.kernels) add(k.name, k.stream, k.seconds);
  busiest_wait += other.busiest_wait;
}

namespace {

struct Builder {
  const Config& c;
  const Machine& m;
  const Spans& spans;
  double e;  // bytes of an activation element

  void gemm(Pass& p, const char* name, double rows, double cols, double inner, const std::string& precision) const {
    p.add(name, Stream::compute, gemm_seconds(m, precision, GemmShape{rows, cols, inner}, precision == "fp32" ? 4 : e));
  }
  // Y[rows, cols] = X[rows, inner]·Wᵀ, forward.
  void linear_forward(Pass& p, const char* name, double rows, double cols, double inner, int count = 1) const {
    for (int i = 0; i < count; ++i) gemm(p, name, rows, cols, inner, c.precision);
  }
  // Its backward: dX = dY·W and dW = dYᵀ·X.
  void linear_backward(Pass& p, const char* name, double rows, double cols, double inner, int count = 1) const {
    for (int i = 0; i < count; ++i) {
      gemm(p, name, rows, inner, cols, c.precision);
      gemm(p, name, cols, inner, rows, c.precision);
    }
  }
  void memory(Pass& p, const char* name, double bytes) const { p.add(name, Stream::compute, memory_seconds(m, bytes)); }
  // The attention core's `flops` in `calls` flash calls of `length` queries and keys each.
  double attention_seconds(double flops, double length, int calls = 1) const {
    return flops / (peak_flops(m, c.precision) * attention_efficiency(m, c.precision, length)) +
           calls * m.kernel_overhead_us * 1e-6;
  }
  void attention(Pass& p, const char* name, double flops) const {
    p.add(name, Stream::compute, attention_seconds(flops, c.shape.seq_length));
  }
  // Tensor-parallel collectives of an [N, h] activation: an all-reduce, or with sequence
  // parallelism an all-gather or a reduce-scatter (the same bytes each way).
  void tensor_all_reduce(Pass& p, const char* name, double bytes) const {
    if (c.tensor() > 1) p.add(name, Stream::tensor, all_reduce_seconds(m, spans.tensor, bytes));
  }
  void tensor_gather(Pass& p, const char* name, double bytes) const {
    if (c.tensor() > 1) p.add(name, Stream::tensor, all_gather_seconds(m, spans.tensor, bytes));
  }
  double gemm_time(double rows, double cols, double inner) const {
    return gemm_seconds(m, c.precision, GemmShape{rows, cols, inner}, c.precision == "fp32" ? 4 : e);
  }
  bool splits_gemms() const {
    return c.overlap_tensor_communication && c.sequence_parallel && c.tensor() > 1 && !c.holds_experts();
  }
  // A sequence-parallel all-gather or reduce-scatter beside the GEMM `gemm` seconds long
  // (Config::overlap_tensor_communication, Transformer Engine's userbuffers with the methods and
  // SM counts of its initialize_ub defaults):
  // * split_gather ("ring_exchange", copy engines): t − 1 ring steps of c = comm/(t − 1) each
  //   interleaved with t GEMM chunks of g = gemm/t; a chunk waits where its step is slower than
  //   the chunk before it, (t − 1)·max(0, c − g);
  // * split_scatter ("pipeline", kPipelineSplits = 4 splits): each split's GEMM, then its
  //   reduce-scatter of comm/4 beside the next split's GEMM; the last one's after the GEMM;
  // * bulk (the backward's): the collective beside the whole GEMM, max(0, comm − gemm).
  // The pipeline's and the bulk's collectives run on kCollectiveSms of the device's SMs (compute
  // units), which the GEMM beside them loses while they run: that time × kCollectiveSms/units more.
  enum class Overlap { split_gather, split_scatter, bulk };
  static constexpr double kPipelineSplits = 4, kCollectiveSms = 16;
  // A GEMM that a split overlap runs in chunks — beside a ring's gather t chunks of its rows (one
  // per rank's rows the ring brings), beside the pipelined reduce-scatter kPipelineSplits chunks
  // of its columns (TE's split_overlap_rs splits the weight: comm_gemm_overlap.h, m_chunk) — on up
  // to kOverlapStreams compute streams at once (NVTE_COMM_OVERLAP_MAX_STREAMS, 3 by default):
  // costed as chunks/3 GEMMs of three chunks each, so that the chunks' wave quantisation shows
  // (512 rows of 4096 on tensor 8).
  static constexpr double kOverlapStreams = 3;
  double split_time(double rows, double cols, double inner, Overlap how) const {
    if (!splits_gemms()) return gemm_time(rows, cols, inner);
    const double chunks = how == Overlap::split_scatter ? kPipelineSplits : c.tensor();
    const double together = std::min(chunks, kOverlapStreams);
    if (how == Overlap::split_scatter) return chunks / together * gemm_time(rows, cols * together / chunks, inner);
    return chunks / together * gemm_time(rows * together / chunks, cols, inner);
  }
  void split_gemm(Pass& p, const char* name, double rows, double cols, double inner, Overlap how) const {
    p.add(name, Stream::compute, split_time(rows, cols, inner, how));
  }
  void tensor_overlapped(Pass& p, const char* name, double bytes, double gemm, Overlap how) const {
    if (c.tensor() <= 1) return;
    const double comm = all_gather_seconds(m, spans.tensor, bytes);
    if (!c.overlap_tensor_communication || !c.sequence_parallel || c.holds_experts()) {
      p.add(name, Stream::tensor, comm);
      return;
    }
    const double t = c.tensor();
    double exposed = 0, beside = 0;  // beside: the collective's time on SMs beside the GEMM
    switch (how) {
      case Overlap::split_gather: exposed = (t - 1) * std::max(0.0, comm / (t - 1) - gemm / t); break;
      case Overlap::split_scatter: {
        const double step = comm / kPipelineSplits, chunk = gemm / kPipelineSplits;
        exposed = step + (kPipelineSplits - 1) * std::max(0.0, step - chunk);
        beside = (kPipelineSplits - 1) * std::min(step, chunk);
        break;
      }
      case Overlap::bulk:
        exposed = std::max(0.0, comm - gemm);
        beside = std::min(comm, gemm);
        break;
    }
    p.add(name, Stream::tensor, exposed);
    p.add("GEMM beside a collective's SMs", Stream::compute, beside * kCollectiveSms / std::max(1, m.compute_units));
  }
  // The same beside the split GEMM of `rows` x `cols` x `inner` that consumes (split_gather) or
  // produces (split_scatter) it.
  void tensor_beside_split_gemm(Pass& p, const char* name, double bytes, double rows, double cols, double inner,
                                Overlap how) const {
    tensor_overlapped(p, name, bytes, split_time(rows, cols, inner, how), how);
  }
};

// Ring attention's ops with their compute and transfers: the compute stream waits for a
// transfer only where the schedule waits for it. The first step (the rank's own block) computes
// one chunk pair more than the later ones. `host_share` of each transfer's time the rank's host
// spends driving it (Machine::communication_host_share), computing nothing meanwhile.
void ring_attention(Pass& p, const std::vector<schedule::RingOp>& ops, double first_step_seconds, double step_seconds,
                    double add_seconds, double kv_seconds, double sums_seconds, double host_share,
                    const char* compute_name) {
  double now = 0, stream_free = 0;
  std::vector<double> done;
  for (const schedule::RingOp& op : ops) {
    switch (op.kind) {
      case schedule::RingOp::post: {
        const double start = std::max(now, stream_free);
        const double transfer = op.flow == schedule::RingFlow::kv ? kv_seconds : sums_seconds;
        stream_free = start + transfer;
        if (op.group >= static_cast<int>(done.size())) done.resize(static_cast<std::size_t>(op.group) + 1);
        done[static_cast<std::size_t>(op.group)] = stream_free;
        p.add("ring transfer (host)", Stream::context, host_share * transfer);
        now += host_share * transfer;
        break;
      }
      case schedule::RingOp::compute: {
        const double seconds = op.step == 0 ? first_step_seconds : step_seconds;
        p.add(compute_name, Stream::compute, seconds);
        now += seconds;
        break;
      }
      case schedule::RingOp::add_sums:
        p.add("ring add dK,dV", Stream::compute, add_seconds);
        now += add_seconds;
        break;
      case schedule::RingOp::wait: {
        const double until = done[static_cast<std::size_t>(op.group)];
        if (until > now) {
          p.add("ring wait", Stream::context, until - now);
          now = until;
        }
        break;
      }
    }
  }
}

}  // namespace

BlockTimes block_times(const Config& c, const Machine& m, const Spans& spans) {
  // Config::sequence_parallel is the plan's switch (plan_config.hpp); the shape's copy is off.
  model::GptShape s = c.shape;
  s.sequence_parallel = c.sequence_parallel;
  const Builder b{c, m, spans, double(c.element_bytes())};
  const double t = s.tensor, e = c.element_bytes();
  const double N = double(c.micro_batch) * s.local_seq_length();  // a micro-batch's tokens on the rank
  const double n = s.splits_sequence() ? N / t : N;                // rows of the residual stream
  const double h = s.hidden, d = s.head_dim();
  // Multi-head latent attention (src/model/multi_head_latent_attention.hpp): its packed Q, K and V
  // of the rank's heads, d_q = d_nope + d_R and d_v wide, and the latents' widths.
  const bool latent = s.latent_attention();
  const double dq = s.qk_head_dim(), dv = s.value_head_dim(), heads_t = s.local_heads();
  const double qkv = latent ? heads_t * (2 * dq + dv) : double(s.local_qkv_width()), attn_out = heads_t * dv;
  const double q_lora = s.q_lora_rank, kv_latent = double(s.kv_lora_rank) + s.qk_rope_head_dim;
  const double f = double(model::mlp_width(s)) / t, fc = double(model::mlp_fc_rows(s)) / t;
  const double shared = double(s.local_shared_ffn());  // DeepSeekMoE's shared experts' width on the rank
  const double activation = N * h * e;  // an [N, h] activation: what a tensor collective moves
  const bool sp = s.splits_sequence();
  BlockTimes out;

  // Attention core FLOPs of the rank's micro-batch (its heads; without context parallelism).
  const bool scores_kept = c.recompute == Recompute::none;
  const double core = model::attention_flops_per_sequence(s, scores_kept) * c.micro_batch;
  // Forward's share: flash visits as many scores forward as backward (4·d and 10·d FLOPs per
  // score); the batched core 4 of its 10 or 12.
  const double forward_share =
      s.flash_attention ? (2.0 * dq + 2.0 * dv) / (8.0 * dq + 6.0 * dv) : 4.0 / (scores_kept ? 10.0 : 12.0);
  const double core_forward = core * forward_share, core_backward = core - core_forward;
  // The batched core is batched GEMMs, Q·Kᵀ [s, s] over k = head_dim and P·V [s, d] over k = s,
  // one per head and sequence: costed by the GEMM model at their shapes (a k = 128 product is
  // near the roofline's ridge: its scores' bytes weigh), not at flash's attention efficiency.
  const double sq = double(s.local_seq_length()), sk = double(s.seq_length);
  const double batched_seconds_per_flop =
      (gemm_seconds(m, c.precision, GemmShape{sq, sk, dq}, e) + gemm_seconds(m, c.precision, GemmShape{sq, dv, sk}, e)) /
      (2.0 * sq * sk * (dq + dv));
  const double scores_bytes =
      s.flash_attention ? 0.0 : 4.0 * c.micro_batch * s.local_heads() * double(s.local_seq_length()) * s.seq_length * e;

  // The MLP, by its kind's structure (model::MlpStructure): dense, or routed to the rank's experts
  // over R = N·K rows at balanced load; its activation gated (reads gate and up) or not.
  const model::MlpStructure& mlp = model::mlp_kind(s).mlp;
  const char* act = mlp.activation;  // a kernel's name is a C string kept for the program's life
  const char* act_again = model::interned_name(std::string(act) + " again");
  const char* act_grad = model::interned_name(std::string(act) + " grad");
  const double R = mlp.routed ? N * s.experts_per_token : N;
  const double expert_rows = mlp.routed ? R / model::local_experts(s) : N;
  const int local_experts = mlp.routed ? model::local_experts(s) : 1;
  const double activation_bytes_per_row = mlp.gated ? 3.0 * f * e : 2.0 * f * e;
  // Under expert parallelism each all-to-all waits for the busiest rank, whose experts receive
  // Config::expert_imbalance × R rows: the time its experts' kernels (`names`, on the balanced R
  // rows in `p`) take beyond a balanced rank's, proportional to the rows, is a wait on the expert
  // stream before the exchange (the balanced ranks idle in it, as bench --phases' ep_comm shows).
  const double imbalance = mlp.routed && c.expert() > 1 ? c.expert_imbalance : 1.0;
  const auto wait_for_busiest_experts = [&](Pass& p, std::initializer_list<const char*> names) {
    double balanced = 0;
    for (const Kernel& k : p.kernels)
      for (const char* name : names)
        if (std::strcmp(k.name, name) == 0) balanced += k.seconds;
    if (imbalance > 1.0) {
      p.add("wait for the busiest expert rank", Stream::expert, (imbalance - 1.0) * balanced);
      p.busiest_wait += (imbalance - 1.0) * balanced;
    }
  };

  // Written out once, forward then backward, so that each pass lists its kernels in order.
  using Overlap = Builder::Overlap;
  // Eager PyTorch (Config::Kernels::eager) runs each elementwise op of torchtitan's Llama block
  // (torchtitan/models/llama/model.py, 2024-12) as its own kernel; bytes per element:
  // RMSNorm x.float() 2+4, pow(2) 4+4, mean 4, x·rsqrt 4+4, type_as 4+2, ·weight 2+2 = 36;
  // rotary on q and k x.float() 2+4, the complex product 4+4, type_as 4+2 = 20; silu 2+2 and its
  // product with w3's output 2+2+2 = 10 per element of f; a residual add 2+2+2. Grouped-query
  // attention's repeat_kv copies K and V to every query head (expand, reshape: read k·d, write a·d
  // each), and the attention's output is made contiguous again (transpose(1, 2).contiguous()). A
  // backward reads each op's output gradient and saved inputs and writes its inputs' gradients:
  // twice the forward's bytes, as the fused kernels' backward is counted below.
  const bool eager = c.kernels == Config::Kernels::eager;
  const double norm_bytes = eager ? 36.0 * n * h : 2.0 * n * h * e;
  // A position kind in the attention (rotary) is an elementwise pass over q and k.
  const bool rotates = model::position_kind(s).in_attention;
  const double rotary_bytes = latent ? 2.0 * N * (heads_t + 1) * s.qk_rope_head_dim * e
                              : eager ? 20.0 * N * (s.local_heads() + s.local_kv_heads()) * d : 2.0 * N * qkv * e;
  const double gated_bytes_per_row = eager ? 10.0 * f : 0.0;
  Pass fwd;
  b.memory(fwd, "norm 1", norm_bytes);
  // MLA: the replicated down-projections and latent norms on the rank's rows, the latents
  // gathered (sequence parallelism), the column-parallel up-projections, the heads packed.
  const double kv_up = heads_t * (double(s.qk_nope_head_dim) + dv), q_width = heads_t * dq;
  const double latents = (q_lora + kv_latent) * e;
  if (latent) {
    if (q_lora > 0) b.linear_forward(fwd, "q down", n, q_lora, h);
    else b.split_gemm(fwd, "q", N, q_width, h, Overlap::split_gather);
    b.linear_forward(fwd, "kv down", n, kv_latent, h);
    b.memory(fwd, "latent norms", 2.0 * n * latents);
    if (sp) b.tensor_gather(fwd, "all-gather (latents)", N * latents);
    if (q_lora > 0) b.linear_forward(fwd, "q up", N, q_width, q_lora);
    b.linear_forward(fwd, "kv up", N, kv_up, s.kv_lora_rank);
    b.memory(fwd, "pack heads", 2.0 * N * (kv_up + s.qk_rope_head_dim + heads_t * (dq + dv)) * e);
  } else {
    if (sp) b.tensor_beside_split_gemm(fwd, "all-gather (sequence parallel)", activation, N, qkv, h, Overlap::split_gather);
    b.split_gemm(fwd, "qkv", N, qkv, h, Overlap::split_gather);
  }
  // The QKV bias is its own kernel (src/model/linear.hpp's bias_add; the projection's and fc2's
  // are fused into the residual add and norm that follow, fc's into the GELU).
  if (s.qkv_bias) b.memory(fwd, "qkv bias", 2.0 * N * qkv * e);
  if (rotates) b.memory(fwd, "rotary", rotary_bytes);
  if (eager && s.local_kv_heads() < s.local_heads())
    b.memory(fwd, "repeat kv", N * 2.0 * (s.local_kv_heads() + s.local_heads()) * d * e);
  const double kv_width = latent ? heads_t * (dq + dv) : 2.0 * s.local_kv_heads() * d;  // K and V of a ring block
  const double kv_bytes = N * kv_width * e;
  const double kv_seconds = point_to_point_seconds(m, spans.context.nodes > 1, kv_bytes);
  const double sums_seconds = point_to_point_seconds(m, spans.context.nodes > 1, N * kv_width * 4);
  // Ring attention (src/model/ring_attention.hpp): its chunk pairs' flash calls at their own
  // length (model::ring_attention_step_flops; three calls the first step, two each later one), and
  // the kernels around them: forward, the merged output and lse zeroed (acc_t), the block's K and
  // V packed, the output rounded; backward, D = rowsum(dO ∘ O), dQ's sum zeroed, K and V packed,
  // each step's dK, dV sums zeroed, the sums and dQ rounded into d_qkv.
  const model::RingStepFlops ring_flops = model::ring_attention_step_flops(s);
  const double mb = c.micro_batch;
  const auto attention_forward = [&](Pass& p) {
    if (s.context > 1) {
      b.memory(p, "ring zero output", N * heads_t * (dv + 1) * 4);
      b.memory(p, "ring pack K,V", 2.0 * N * kv_width * e);
      Pass ring;
      ring_attention(ring, schedule::ring_forward_ops(s.context),
                     b.attention_seconds(mb * ring_flops.first_forward, ring_flops.chunk, 3),
                     b.attention_seconds(mb * ring_flops.later_forward, ring_flops.chunk, 2), 0, kv_seconds, 0,
                     m.communication_host_share, "attention (ring step)");
      p.append(ring);
      b.memory(p, "ring round output", N * heads_t * dv * (4 + e));
    } else if (!s.flash_attention) {
      p.add("attention (batched)", Stream::compute, core_forward * batched_seconds_per_flop);
      b.memory(p, "softmax", scores_bytes);
    } else {
      b.attention(p, "attention", core_forward);
    }
  };
  attention_forward(fwd);
  if (eager) b.memory(fwd, "attention output contiguous", 2.0 * N * attn_out * e);
  b.split_gemm(fwd, "attention projection", N, h, attn_out, Overlap::split_scatter);
  if (sp) b.tensor_beside_split_gemm(fwd, "reduce-scatter (sequence parallel)", activation, N, h, attn_out, Overlap::split_scatter);
  else b.tensor_all_reduce(fwd, "all-reduce (tensor parallel)", activation);
  b.memory(fwd, "residual add", 3.0 * n * h * e);
  b.memory(fwd, "norm 2", norm_bytes);
  if (sp) b.tensor_beside_split_gemm(fwd, "all-gather (sequence parallel)", activation, N, fc, h, Overlap::split_gather);
  const double all_to_all = mlp.routed && c.expert() > 1 ? all_to_all_seconds(m, spans.expert, R * h * e) : 0.0;
  if (mlp.routed) {
    b.gemm(fwd, "router", N, s.experts, h, "fp32");
    b.memory(fwd, "router softmax, top-k", 3.0 * N * s.experts * 4);
    b.memory(fwd, "dispatch", 2.0 * R * h * e);
    // tptrain's dispatcher (src/model/moe_token_dispatcher.hpp) sends each rank's row counts
    // first, on the host, then the rows: a second all-to-all, of a few bytes (its latency).
    if (c.expert() > 1)
      fwd.add("all-to-all counts (experts)", Stream::expert, all_to_all_seconds(m, spans.expert, 8.0 * c.expert()));
    fwd.add("all-to-all (experts)", Stream::expert, all_to_all);
    b.linear_forward(fwd, "expert gate|up", expert_rows, fc, h, local_experts);
  } else {
    b.split_gemm(fwd, "fc", N, fc, h, Overlap::split_gather);
  }
  const double gated_bytes =
      eager && mlp.gated && !mlp.routed ? R * gated_bytes_per_row : R * activation_bytes_per_row;
  b.memory(fwd, act, gated_bytes);
  if (mlp.routed) b.linear_forward(fwd, "expert down", expert_rows, h, f, local_experts);
  else b.split_gemm(fwd, "fc2", N, h, f, Overlap::split_scatter);
  // The shared experts: a SwiGLU on every token, its output added in the combine.
  if (mlp.routed && shared > 0) {
    b.linear_forward(fwd, "shared experts gate|up", N, 2 * shared, h);
    b.memory(fwd, "shared experts swiglu", 3.0 * N * shared * e);
    b.linear_forward(fwd, "shared experts down", N, h, shared);
  }
  if (mlp.routed) {
    wait_for_busiest_experts(fwd, {"expert gate|up", act, "expert down"});
    fwd.add("all-to-all (experts)", Stream::expert, all_to_all);
    b.memory(fwd, "combine", 2.0 * R * h * e);
  }
  if (sp) b.tensor_beside_split_gemm(fwd, "reduce-scatter (sequence parallel)", activation, N, h, f, Overlap::split_scatter);
  else b.tensor_all_reduce(fwd, "all-reduce (tensor parallel)", activation);
  b.memory(fwd, "residual add", 3.0 * n * h * e);
  out.forward = fwd;

  Pass bwd;
  if (c.recompute == Recompute::full) {
    for (const Kernel& k : fwd.kernels) bwd.add(k.name, k.stream, k.seconds);  // the forward again
  } else if (c.recompute_alternate_gemms) {
    // torchtitan's op-level selective checkpointing: every memory-bound kernel of the forward
    // again, and every second GEMM in the order torchtitan's block runs them (wq, wk, wv, wo,
    // w1, w3, w2: wk, wo and w3; a GELU block's qkv, proj, fc, fc2: proj and fc2).
    for (const Kernel& k : fwd.kernels) {
      const std::string name = k.name;
      if (name == "norm 1" || name == "norm 2" || name == "rotary" || name == "residual add" || name == act ||
          name == "repeat kv" || name == "attention output contiguous")
        bwd.add(k.name, k.stream, k.seconds);
    }
    if (mlp.gated && !mlp.routed) {
      b.linear_forward(bwd, "recompute k", N, double(s.local_kv_heads()) * d, h);
      b.linear_forward(bwd, "recompute attention projection", N, h, attn_out);
      b.linear_forward(bwd, "recompute up", expert_rows, f, h, local_experts);
    } else {
      b.linear_forward(bwd, "recompute attention projection", N, h, attn_out);
      b.linear_forward(bwd, "recompute fc2", expert_rows, h, f, local_experts);
    }
  }
  b.memory(bwd, "residual grad", 3.0 * n * h * e);
  if (sp) b.tensor_beside_split_gemm(bwd, "all-gather (sequence parallel)", activation, N, f, h, Overlap::split_gather);
  if (mlp.routed) {
    b.memory(bwd, "combine grad", 2.0 * R * h * e);
    bwd.add("all-to-all (experts)", Stream::expert, all_to_all);
  }
  if (mlp.routed) {
    b.linear_backward(bwd, "expert down grad", expert_rows, h, f, local_experts);
    if (shared > 0) {
      b.linear_backward(bwd, "shared experts down grad", N, h, shared);
      b.memory(bwd, "shared experts swiglu again, grad", 3.0 * 3.0 * N * shared * e);
      b.linear_backward(bwd, "shared experts gate|up grad", N, 2 * shared, h);
    }
  } else {
    if (s.linear_bias) b.memory(bwd, "fc2 bias grad", n * h * e);  // column sums of dY (bias_backward)
    b.split_gemm(bwd, "fc2 grad", N, f, h, Overlap::split_gather);  // dX, chunk by chunk as dY's rows arrive
    b.gemm(bwd, "fc2 grad", h, f, N, c.precision);
  }
  // tptrain's MLP does not keep the activation the projection's dW needs (its scratch holds
  // another layer's by then): the backward computes it again from the saved input (and, GELU, the
  // saved sigmoid) first (src/model/dense_mlp_layers.hpp): read 2, write 1 per element of f.
  if (c.kernels == Config::Kernels::tptrain && c.recompute != Recompute::full)
    b.memory(bwd, act_again, R * 3.0 * f * e);
  b.memory(bwd, act_grad, 2.0 * gated_bytes);
  if (sp) b.tensor_overlapped(bwd, "all-gather (norm 2 output again)", activation, b.gemm_time(N, h, fc), Overlap::bulk);
  if (mlp.routed) {
    b.linear_backward(bwd, "expert gate|up grad", expert_rows, fc, h, local_experts);
    wait_for_busiest_experts(bwd, {"expert down grad", act_again, act_grad, "expert gate|up grad"});
    bwd.add("all-to-all (experts)", Stream::expert, all_to_all);
    b.memory(bwd, "dispatch grad", 2.0 * R * h * e);
    b.gemm(bwd, "router grad", N, h, s.experts, "fp32");
    b.gemm(bwd, "router grad", s.experts, h, N, "fp32");
    if (c.tensor() > 1) bwd.add("all-reduce (routing weights)", Stream::tensor,
                                all_reduce_seconds(m, spans.tensor, N * s.experts_per_token * 4.0));
  } else {
    b.linear_backward(bwd, "fc grad", N, fc, h);
  }
  if (sp) b.tensor_overlapped(bwd, "reduce-scatter (sequence parallel)", activation, b.gemm_time(fc, h, N), Overlap::bulk);
  else b.tensor_all_reduce(bwd, "all-reduce (tensor parallel)", activation);
  b.memory(bwd, "norm 2 grad", 2.0 * norm_bytes);
  if (sp) b.tensor_beside_split_gemm(bwd, "all-gather (sequence parallel)", activation, N, attn_out, h, Overlap::split_gather);
  if (s.linear_bias) b.memory(bwd, "attention projection bias grad", n * h * e);
  b.split_gemm(bwd, "attention projection grad", N, attn_out, h, Overlap::split_gather);
  b.gemm(bwd, "attention projection grad", h, attn_out, N, c.precision);
  if (eager) b.memory(bwd, "attention output contiguous grad", 2.0 * N * attn_out * e);
  // Megatron-Core's selective recomputation checkpoints the whole core attention
  // (megatron/core/transformer/attention.py, checkpoint_core_attention: "core_attn" in
  // --recompute-modules, its default): the backward runs the core's forward again, flash and
  // ring attention included, before its backward.
  if (c.kernels == Config::Kernels::megatron_core && c.recompute == Recompute::selective) attention_forward(bwd);
  if (s.context > 1) {
    b.memory(bwd, "ring delta", N * heads_t * (2.0 * dv * e + 4));
    b.memory(bwd, "ring zero dQ", N * heads_t * dq * 4);
    b.memory(bwd, "ring pack K,V", 2.0 * N * kv_width * e);
    const double zero_sums = memory_seconds(m, N * kv_width * 4);
    Pass ring;
    ring_attention(ring, schedule::ring_backward_ops(s.context),
                   b.attention_seconds(mb * ring_flops.first_backward, ring_flops.chunk, 3) + zero_sums,
                   b.attention_seconds(mb * ring_flops.later_backward, ring_flops.chunk, 2) + zero_sums,
                   memory_seconds(m, 3.0 * N * kv_width * 4), kv_seconds, sums_seconds, m.communication_host_share,
                   "attention grad (ring step)");
    bwd.append(ring);
    b.memory(bwd, "ring round dQ, dK, dV", N * (kv_width + heads_t * dq) * (4 + e));
  } else if (!s.flash_attention) {
    bwd.add("attention grad (batched)", Stream::compute, core_backward * batched_seconds_per_flop);
    b.memory(bwd, "softmax grad", 1.5 * scores_bytes);
  } else {
    b.attention(bwd, "attention grad", core_backward);
  }
  if (eager && s.local_kv_heads() < s.local_heads())
    b.memory(bwd, "repeat kv grad", 2.0 * N * 2.0 * (s.local_kv_heads() + s.local_heads()) * d * e);
  if (rotates) b.memory(bwd, "rotary grad", eager ? 2.0 * rotary_bytes : rotary_bytes);
  if (latent) {  // the heads unpacked, the up-projections, f's backward on the latents, the norms, the down-projections
    b.memory(bwd, "unpack heads", 2.0 * N * (kv_up + s.qk_rope_head_dim + heads_t * (dq + dv)) * e);
    if (sp) b.tensor_gather(bwd, "all-gather (latents again)", N * latents);
    b.linear_backward(bwd, "kv up grad", N, kv_up, s.kv_lora_rank);
    if (q_lora > 0) b.linear_backward(bwd, "q up grad", N, q_width, q_lora);
    if (sp) b.tensor_gather(bwd, "reduce-scatter (latents)", N * latents);
    else if (c.tensor() > 1) b.tensor_all_reduce(bwd, "all-reduce (latents)", N * latents);
    b.memory(bwd, "latent norms grad", 4.0 * n * latents);
    b.linear_backward(bwd, "kv down grad", n, kv_latent, h);
    if (q_lora > 0) {
      b.linear_backward(bwd, "q down grad", n, q_lora, h);
    } else {
      if (sp) b.tensor_overlapped(bwd, "all-gather (norm 1 output again)", activation, b.gemm_time(N, h, q_width), Overlap::bulk);
      b.linear_backward(bwd, "q grad", N, q_width, h);
      if (sp) b.tensor_overlapped(bwd, "reduce-scatter (sequence parallel)", activation, b.gemm_time(q_width, h, N), Overlap::bulk);
      else b.tensor_all_reduce(bwd, "all-reduce (tensor parallel)", activation);
    }
  } else {
    if (sp) b.tensor_overlapped(bwd, "all-gather (norm 1 output again)", activation, b.gemm_time(N, h, qkv), Overlap::bulk);
    b.linear_backward(bwd, "qkv grad", N, qkv, h);
    if (s.qkv_bias) b.memory(bwd, "qkv bias grad", N * qkv * e);  // column sums of dY (bias_backward)
    if (sp) b.tensor_overlapped(bwd, "reduce-scatter (sequence parallel)", activation, b.gemm_time(qkv, h, N), Overlap::bulk);
    else b.tensor_all_reduce(bwd, "all-reduce (tensor parallel)", activation);
  }
  b.memory(bwd, "norm 1 grad", 2.0 * norm_bytes);
  b.memory(bwd, "residual grad", 3.0 * n * h * e);
  out.backward = bwd;

  // The embedding (first virtual stage): the lookup, then its tensor-parallel reduction (the
  // vocabulary is split over the tensor ranks); backward the rows' gradients scattered back.
  b.memory(out.embedding_forward, "embedding", 2.0 * N * h * e);
  if (sp) b.tensor_gather(out.embedding_forward, "reduce-scatter (embedding)", activation);
  else b.tensor_all_reduce(out.embedding_forward, "all-reduce (embedding)", activation);
  if (sp) b.tensor_gather(out.embedding_backward, "all-gather (embedding grad)", activation);
  b.memory(out.embedding_backward, "embedding grad", 3.0 * N * h * 4);

  // The head (last virtual stage): ln_f, the logits over the rank's vocabulary rows, the
  // vocabulary-parallel cross-entropy (three fp32 [N] all-reduces), and their backward.
  const double V = s.local_vocab();
  b.memory(out.head_forward, "final norm", norm_bytes);
  if (sp) b.tensor_gather(out.head_forward, "all-gather (sequence parallel)", activation);
  b.linear_forward(out.head_forward, "logits", N, V, h);
  // Bytes per logit of the cross-entropy, forward and backward. tptrain's fused kernels: read
  // the logits, write the softmax (3e), then read it and write the gradient (2e). Megatron-Core's
  // vocab_parallel_cross_entropy (unfused, its default): .float() 2+4, max 4, − max in place 4+4,
  // exp 4+4, sum 4, ÷ sum in place 4+4 = 38, the fp32 softmax kept; backward: mul_ by the loss
  // gradient 4+4, the cast back to the logits' bf16 4+2 = 14. torchtitan's F.cross_entropy of
  // pred.float(): the cast 2+4, log_softmax 4 (max, sum) + 4+4 = 18; backward: nll's scatter
  // into zeros 4, log_softmax's 4+4+4, the cast back 4+2 = 22.
  double entropy_forward = 3.0 * e, entropy_backward = 2.0 * e;
  if (c.kernels == Config::Kernels::megatron_core) entropy_forward = 38, entropy_backward = 14;
  if (eager) entropy_forward = 18, entropy_backward = 22;
  b.memory(out.head_forward, "cross-entropy", entropy_forward * N * V);
  if (c.tensor() > 1)
    out.head_forward.add("all-reduce (cross-entropy)", Stream::tensor, 3.0 * all_reduce_seconds(m, spans.tensor, N * 4.0));
  b.memory(out.head_backward, "cross-entropy grad", entropy_backward * N * V);
  b.linear_backward(out.head_backward, "logits grad", N, V, h);
  if (sp) b.tensor_gather(out.head_backward, "reduce-scatter (sequence parallel)", activation);
  else b.tensor_all_reduce(out.head_backward, "all-reduce (logits grad)", activation);
  b.memory(out.head_backward, "final norm grad", 2.0 * norm_bytes);

  // One block's matrices on a rank (the dense ones split over the tensor ranks, the rank's
  // experts), its gradients fp32.
  double dense = 0, expert = 0;
  for (const model::ParameterRow& r : model::block_parameter_kinds(s)) {
    double size = double(model::extent(r.shape[0], s));
    if (r.shape[1] != model::ParameterDim::none) size *= double(model::extent(r.shape[1], s));
    if (r.per_expert) expert += size * model::local_experts(s) / t;
    else dense += r.split == model::TensorSplit::replicated ? size : size / t;
  }
  out.block_gradient_bytes = 4.0 * dense;
  out.block_expert_gradient_bytes = 4.0 * expert;
  if (c.shard_parameters && c.data_context() > 1) {
    const int layers = std::max(1, s.layers / (c.pipeline * c.virtual_stages));
    const double gather = all_gather_seconds(m, spans.shard, dense * e) + all_gather_seconds(m, spans.expert_data, expert * e);
    const double scatter = all_gather_seconds(m, spans.shard, 4.0 * dense) + all_gather_seconds(m, spans.expert_data, 4.0 * expert);
    out.sharded_forward.add("all-gather weights (FSDP)", Stream::data,
                            gather + (layers - 1) * std::max(0.0, gather - out.forward.seconds));
    // Without reshard_after_forward the backward finds its module's weights still gathered.
    const double regather = c.reshard_after_forward ? gather : 0.0;
    out.sharded_backward.add(c.reshard_after_forward ? "all-gather weights, reduce-scatter gradients (FSDP)"
                                                     : "reduce-scatter gradients (FSDP)",
                             Stream::data,
                             regather + (layers - 1) * std::max(0.0, regather + scatter - out.backward.seconds) + scatter);
    // The root module's: the word embedding and, untied, lm_head; the final norm beside them.
    const double root = (s.tie_embeddings ? 1.0 : 2.0) * V * h + h;
    out.embedding_forward.add("all-gather embedding and head (FSDP)", Stream::data, all_gather_seconds(m, spans.shard, root * e));
    out.embedding_backward.add("reduce-scatter embedding and head (FSDP)", Stream::data,
                               all_gather_seconds(m, spans.shard, root * 4.0));
  }
  out.pipeline_message_bytes = n * h * e;
  return out;
}

}  // namespace tptrain::plan
