// The mixture-of-experts MLP (model.mlp = "moe"; Mixtral's MixtralSparseMoeBlock, Jiang et al.
// 2024; Switch Transformers, Fedus et al. 2021; Megatron-Core's MoELayer), in place of a block's
// dense MLP:
//   router:  logits = x · Wrᵀ (fp32), p = softmax over E, the top k renormalised to w (sum 1);
//   experts: token t goes to its k experts, y[t] = Σ_j w_j · down_e(silu(gate_e x) · up_e x).
// Dropless (the default): a token's k copies are sorted by expert (positions on the host, which
// also gives the all-to-all its counts), each expert runs its rows as one GEMM, and the outputs are
// summed back with their weights. A capacity factor c > 0 keeps the first ceil(c·k·N/E) copies of
// each expert (token order) and drops the rest, whose output is 0.
//
// Tensor parallelism: every tensor rank routes the same N tokens (with sequence parallelism
// gathered first), the router is replicated, and each expert's SwiGLU is split as the dense one
// (gate|up column-parallel, down row-parallel), so a rank's expert outputs are partial sums over
// the tensor group: the weighted sum is reduced over it at the exit (all-reduce, or reduce-scatter
// with sequence parallelism), the conjugate of the gather at the entry. In the backward the
// weights' gradient <dy, out_e> is such a partial sum too and is all-reduced over the group (N·k
// values), after which the router's backward is identical on every tensor rank; its input
// gradient is added on tensor rank 0 only, before the input gradient's reduction.
//
// Expert parallelism (parallel.expert = ep): rank r of the expert group holds experts
// [r·E/ep, (r+1)·E/ep). The sorted copies are dispatched to their experts' ranks by all-to-all
// (counts first, on the host, then the rows) and the outputs come back by the inverse all-to-all
// (combine); the backward sends the output gradients the same way and returns the input gradients
// (Megatron's MoEAlltoAllTokenDispatcher). Received rows are grouped by source rank, then expert:
// an expert runs one GEMM per source's chunk. Expert parameters are summed and sharded over the
// expert-data group (src/model/gpt_model.hpp: their own buckets).
//
// The load-balancing loss (Switch eq. 4, Mixtral's router_aux_loss_coef) E · Σ_e f_e · P_e, f_e the
// fraction of the micro-batch's tokens routed to e (Σ_e f_e = k, as Hugging Face counts it), P_e the
// mean router probability, and the router z-loss mean_t (log Σ_e exp logit)² (ST-MoE, Zoph et al.
// 2022) are computed per block over the micro-batch's tokens and averaged over the blocks; they
// add gradients to the router only (f carries none). loss_weights says how much. Under context
// parallelism a rank routes only its chunks of the sequences: the counts, the probability sums and
// the lse² sum are summed over the context group first (as Megatron-Core reduces them over tensor ×
// context), so that f, P and both losses are the whole micro-batch's and equal the one-rank run's.
// A capacity, by contrast, applies to each rank's own tokens.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kokkos_kernels/gemm.hpp"
#include "kokkos_kernels/moe_routing.hpp"
#include "kokkos_kernels/swiglu.hpp"
#include "src/model/block_descriptor.hpp"
#include "src/model/gpt_shape.hpp"
#include "src/model/linear.hpp"
#include "src/model/workspace.hpp"
#include "src/parallel/collectives.hpp"

namespace tptrain::model {

// The MoE losses' coefficients and the gradient weight of one micro-batch of them.
struct MoeLossWeights {
  double aux = 0.0;  // training.moe_aux_loss_coeff
  double z = 0.0;    // training.moe_z_loss_coeff
};

// What the blocks' routers saw since the last reset (MixtureOfExperts::statistics): summed over
// micro-batches and blocks on this rank; the trainer reduces them over the ranks for metrics.
struct MoeStatistics {
  double aux_loss_sum = 0.0;  // Σ over (micro-batch, block) of E · Σ_e f_e P_e
  double z_loss_sum = 0.0;    // Σ of mean_t lse²
  std::int64_t samples = 0;   // (micro-batch, block) pairs
  std::vector<std::int64_t> tokens_per_expert;  // [E]: copies routed, summed
  std::int64_t dropped = 0;   // copies dropped by a capacity
  void add(const MoeStatistics& o) {
    aux_loss_sum += o.aux_loss_sum;
    z_loss_sum += o.z_loss_sum;
    samples += o.samples;
    dropped += o.dropped;
    if (tokens_per_expert.size() < o.tokens_per_expert.size()) tokens_per_expert.resize(o.tokens_per_expert.size(), 0);
    for (std::size_t e = 0; e < o.tokens_per_expert.size(); ++e) tokens_per_expert[e] += o.tokens_per_expert[e];
  }
};

// Rows whose number depends on the routing: allocated for the balanced load N·k when the layer is
// built (the most a rank has without expert parallelism, dropless), reallocated larger when a
// micro-batch needs more. Under expert parallelism a rank may receive up to ep·N·k rows; the
// buffers grow to the largest load seen (by half again at least, so that an imbalance that
// creeps up reallocates a few times, not every step), not to that bound.
template <class U>
struct GrowingRows {
  kernels::Matrix<U> storage;
  std::string name;
  std::int64_t cols = 0;
  GrowingRows() = default;
  GrowingRows(std::string label, std::int64_t columns, std::int64_t reserve) : name(std::move(label)), cols(columns) {
    (void)rows(reserve);
  }
  kernels::Matrix<U> rows(std::int64_t n) {
    const auto held = static_cast<std::int64_t>(storage.extent(0));
    if (n > held || storage.extent(1) == 0) {
      util::MemoryCategoryScope as(util::MemoryCategory::activations);
      storage = Matrix(Kokkos::view_alloc(Kokkos::WithoutInitializing, name),
                       held == 0 ? n : std::max<std::int64_t>(n, held * 3 / 2), cols);
    }
    return first_rows(storage, n);
  }

 private:
  using Matrix = kernels::Matrix<U>;
};

template <class T>
struct MixtureOfExperts {
  using Acc = kx::acc_t<T>;
  using Index = Kokkos::View<int**, Kokkos::LayoutRight, kx::MemSpace>;

  // What forward keeps for backward, one set per micro-batch in flight.
  struct Routes {
    kernels::Matrix<Acc> probs;   // [N, E]
    kernels::Vector<Acc> lse;     // [N]
    Index expert, pos;            // [N, k]: the slot's expert and its row among the sorted copies (-1: dropped)
    kernels::Matrix<Acc> weight;  // [N, k]
    std::vector<double> aux_gradient;  // [E] host: E · f_e / N (the load-balancing loss's dL/dp_e, unweighted)
    double loss_tokens = 0;            // N of the losses' means: the micro-batch's tokens over the context group
    std::int64_t kept = 0;             // sorted copies (rows) on this rank
    std::vector<std::size_t> send_rows, recv_rows;  // [ep]: rows sent to / received from each rank
    std::vector<std::int64_t> chunk_rows;           // [ep · E/ep]: received rows by (source, local expert)
    GrowingRows<T> in, h, out;  // received rows [R, H], their gate|up [R, 2F/t], outputs back home [kept, H]
  };
  using Saved = std::shared_ptr<Routes>;

  Saved make_saved(const std::string& name) const {
    auto r = std::make_shared<Routes>();
    util::MemoryCategoryScope as(util::MemoryCategory::activations);
    r->probs = kernels::Matrix<Acc>(name + ".router_probs", tokens_, shape_.experts);
    r->lse = kernels::Vector<Acc>(name + ".router_lse", tokens_);
    r->expert = Index(name + ".route_expert", tokens_, shape_.experts_per_token);
    r->pos = Index(name + ".route_row", tokens_, shape_.experts_per_token);
    r->weight = kernels::Matrix<Acc>(name + ".route_weight", tokens_, shape_.experts_per_token);
    const std::int64_t balanced = tokens_ * shape_.experts_per_token;
    r->in = GrowingRows<T>(name + ".expert_in", shape_.hidden, balanced);
    r->h = GrowingRows<T>(name + ".expert_h", 2 * std::int64_t(shape_.local_ffn()), balanced);
    r->out = GrowingRows<T>(name + ".expert_out", shape_.hidden, balanced);
    return r;
  }

  GptShape shape_;
  std::int64_t tokens_;  // N: the micro-batch's tokens (all of them with sequence parallelism)
  int ep_rank_ = 0, ep_size_ = 1;
  Communicator* ep_ = nullptr;  // the expert-parallel group (null: ep = 1)
  Communicator* cp_ = nullptr;  // the context group (null: parallel.context = 1)
  Parameter<T> router;          // [E, H], replicated
  std::vector<Parameter<T>> fc, proj;  // the rank's experts: [2F/t, H] gate|up, [H, F/t] down
  Saved saved;
  SequenceParallelBuffers<T> sp;
  MoeLossWeights loss_weights;   // the trainer's coefficients; 0: the losses add no gradient
  Acc micro_batch_weight = 0;    // the gradient weight of this micro-batch's mean losses (GptModel::backward)
  Acc layer_weight = 1;          // 1 / layers: the losses are averaged over the blocks
  bool record = true;            // add this forward's routing to the statistics (not a recomputation)
  MoeStatistics stats;
  // Scratch of the routed rows and the router, shared by the micro-batches and (GptModel) by the
  // stage's blocks, allocated at the first forward: like the routed rows it lives outside the
  // workspace (the planner counts it, src/plan/activation_memory.cpp).
  struct Scratch {
    GrowingRows<T> sorted, a, da, dh, expert_out, d_rows, d_in;
    kernels::Matrix<T> dy_gathered;                   // [N, H] with sequence parallelism
    kernels::Matrix<Acc> dweight, dlogits;            // [N, k], [N, E]
    kernels::Vector<Acc> router_stats, aux_gradient;  // [E + 1], [E]
  };
  std::shared_ptr<Scratch> scratch;

  MixtureOfExperts(const std::string& name, const GptShape& s, std::int64_t tokens, const Communicator& tp,
                   Workspace<T>& ws, int ep_rank, const SavedPlacement& placement = {})
      : shape_(s), tokens_(tokens), ep_rank_(ep_rank), ep_size_(s.expert_parallel),
        router(make_parameter<T>(with_split(block_parameter(s, name + "/router/weight"), TensorSplit::replicated,
                                            "the MoE router"),
                                 tp)),
        layer_weight(Acc(1) / Acc(s.layers)) {
    for (int e = s.first_expert(ep_rank); e < s.first_expert(ep_rank) + s.local_experts(); ++e) {
      const std::string expert = name + "/experts/" + std::to_string(e);
      fc.push_back(make_parameter<T>(
          with_split(block_parameter(s, expert + "/fc/weight"), TensorSplit::column, "an expert's gate|up"), tp));
      proj.push_back(make_parameter<T>(
          with_split(block_parameter(s, expert + "/proj/weight"), TensorSplit::row, "an expert's down projection"), tp));
    }
    saved = make_saved(placement.name_for(name));
    const std::int64_t H = s.hidden, f = s.local_ffn();
    // Allocated at first use: a model gives its blocks the first block's (GptModel).
    scratch = std::make_shared<Scratch>();
    Scratch& w = *scratch;
    w.sorted = GrowingRows<T>("moe.sorted", H, 0);
    w.a = GrowingRows<T>("moe.a", f, 0);
    w.da = GrowingRows<T>("moe.da", f, 0);
    w.dh = GrowingRows<T>("moe.dh", 2 * f, 0);
    w.expert_out = GrowingRows<T>("moe.expert_out", H, 0);
    w.d_rows = GrowingRows<T>("moe.d_rows", H, 0);
    w.d_in = GrowingRows<T>("moe.d_in", H, 0);
    sp = sequence_parallel_buffers(ws, s, tokens);
    stats.tokens_per_expert.assign(static_cast<std::size_t>(s.experts), 0);
  }

  void bind_expert_group(Communicator& ep) {
    if (ep.size() != ep_size_ || ep.rank() != ep_rank_)
      throw std::invalid_argument("tptrain: the expert group is rank " + std::to_string(ep.rank()) + " of " +
                                  std::to_string(ep.size()) + ", the model was built for rank " +
                                  std::to_string(ep_rank_) + " of parallel.expert = " + std::to_string(ep_size_));
    ep_ = ep.size() > 1 ? &ep : nullptr;
  }

  // The group over which the losses' statistics are summed (GptModel::bind_context).
  void bind_context_group(Communicator& cp) { cp_ = cp.size() > 1 ? &cp : nullptr; }

  // The router, then each local expert's gate|up and down: the block descriptor's order.
  std::vector<Parameter<T>*> parameters() {
    std::vector<Parameter<T>*> ps{&router};
    for (std::size_t e = 0; e < fc.size(); ++e) {
      ps.push_back(&fc[e]);
      ps.push_back(&proj[e]);
    }
    return ps;
  }
  // Whether p is an expert's (summed over the expert-data group, not the data group).
  static bool is_expert_parameter(const Parameter<T>* p) { return expert_of_row(row_of(p->name)) >= 0; }
  static std::string row_of(const std::string& name) {
    const std::size_t at = name.find("mlp/");
    return at == std::string::npos ? name : name.substr(at);
  }

  // y [rows, H] = the mixture's output for x [rows, H] (rows = N, or N/t with sequence parallelism;
  // fewer without it: generation's new tokens).
  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x, const YV& y) {
    Routes& r = *saved;
    Scratch& w = allocated(*scratch);
    if (ep_size_ > 1 && ep_ == nullptr)
      throw std::logic_error("tptrain: a mixture of experts over parallel.expert = " + std::to_string(ep_size_) +
                             " ranks without its expert group (bind_expert_group)");
    kernels::Matrix<T> xg;
    if (sp.enabled()) {
      parallel::gather_from_sequence_parallel_region_forward(tp, exec, x, sp.gathered);
      xg = sp.gathered;
    } else {
      xg = x;
    }
    const std::int64_t n = xg.extent(0);
    const auto [probs, lse, expert, pos, weight] = routes_of(r, n);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::moe_route(exec, xg, router.value_matrix(), probs, lse, expert, weight);
      kernels::moe_router_statistics(exec, probs, lse, w.router_stats);
    }
    sort_copies(exec, r, w, expert, pos, n);
    // Dispatch: the copies in expert order, to their experts' ranks.
    kernels::Matrix<T> in = r.in.rows(received_rows(r));
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::moe_permute(exec, xg, pos, ep_ ? w.sorted.rows(r.kept) : in);
    }
    if (ep_) exchange(exec, w.sorted.rows(r.kept), r.send_rows, in, r.recv_rows);
    // The experts: one GEMM per (source, expert) chunk of rows.
    kernels::Matrix<T> h = r.h.rows(in.extent(0)), act = w.a.rows(in.extent(0));
    kernels::Matrix<T> out = ep_ ? w.expert_out.rows(in.extent(0)) : r.out.rows(r.kept);
    for_each_chunk(r, [&](std::size_t e, std::int64_t begin, std::int64_t end) {
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, rows_of(in, begin, end), fc[e].value_matrix(), rows_of(h, begin, end));
      kernels::silu_mul_forward(exec, rows_of(h, begin, end), rows_of(act, begin, end));
      kernels::linear_forward(exec, rows_of(act, begin, end), proj[e].value_matrix(), rows_of(out, begin, end));
    });
    // Combine: the outputs home, weighted and summed, then reduced over the tensor group.
    if (ep_) exchange(exec, out, r.recv_rows, r.out.rows(r.kept), r.send_rows);
    PhaseScope phase(Phase::norms_elementwise);
    if (sp.enabled()) {
      kernels::moe_combine(exec, r.out.rows(r.kept), pos, weight, sp.partial);
      parallel::reduce_scatter_to_sequence_parallel_region_forward(tp, exec, sp.partial, y);
    } else {
      kernels::moe_combine(exec, r.out.rows(r.kept), pos, weight, y);
      parallel::reduce_from_tp_region_forward(tp, exec, y);
    }
  }

  // dx [rows, H] (overwritten) from dy [rows, H]; x is the forward's input.
  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy, const XV& x, const DXV& dx) {
    Routes& r = *saved;
    Scratch& w = allocated(*scratch);
    kernels::Matrix<T> dyg = dy;
    if (sp.enabled()) {
      parallel::reduce_scatter_to_sequence_parallel_region_backward(tp, exec, dy, w.dy_gathered);  // all-gather
      dyg = w.dy_gathered;
    }
    const std::int64_t n = dyg.extent(0);
    const auto [probs, lse, expert, pos, weight] = routes_of(r, n);
    const kernels::Matrix<Acc> dw = first_rows(w.dweight, n);
    // Through the weighted sum: each copy's output gradient, and the weights' (partial over tensor).
    kernels::Matrix<T> d_sorted = ep_ ? w.d_rows.rows(r.kept) : w.d_in.rows(r.kept);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::moe_combine_backward(exec, dyg, r.out.rows(r.kept), pos, weight, d_sorted, dw);
    }
    parallel::all_reduce(tp, exec, dw, parallel::ReduceOp::sum);
    // To the experts, as the forward's dispatch.
    kernels::Matrix<T> in = r.in.rows(received_rows(r));
    kernels::Matrix<T> d_out = ep_ ? w.d_in.rows(in.extent(0)) : d_sorted;
    if (ep_) exchange(exec, d_sorted, r.send_rows, d_out, r.recv_rows);
    // Each expert's SwiGLU backward; d_out's rows become the input gradients of the rows.
    kernels::Matrix<T> h = r.h.rows(in.extent(0)), act = w.a.rows(in.extent(0)), d_act = w.da.rows(in.extent(0)),
                       d_h = w.dh.rows(in.extent(0));
    for_each_chunk(r, [&](std::size_t e, std::int64_t begin, std::int64_t end) {
      const auto d_o = rows_of(d_out, begin, end), x_e = rows_of(in, begin, end), h_e = rows_of(h, begin, end);
      const auto a_e = rows_of(act, begin, end), da_e = rows_of(d_act, begin, end), dh_e = rows_of(d_h, begin, end);
      PhaseScope phase(Phase::gemm);
      kernels::silu_mul_forward(exec, h_e, a_e);  // the scratch holds another micro-batch's by now
      kernels::linear_backward_weight(exec, d_o, a_e, proj[e].grad_matrix());
      kernels::linear_backward_input(exec, d_o, proj[e].value_matrix(), da_e);
      kernels::silu_mul_backward(exec, da_e, h_e, dh_e);
      kernels::linear_backward_weight(exec, dh_e, x_e, fc[e].grad_matrix());
      kernels::linear_backward_input(exec, dh_e, fc[e].value_matrix(), d_o);
    });
    // The input gradients home, summed over each token's copies (a partial sum over tensor).
    kernels::Matrix<T> d_home = ep_ ? w.d_rows.rows(r.kept) : d_out;
    if (ep_) exchange(exec, d_out, r.recv_rows, d_home, r.send_rows);
    kernels::Matrix<T> xg = x, dxg = dx;
    if (sp.enabled()) {
      parallel::gather_from_sequence_parallel_region_forward(tp, exec, x, sp.gathered);
      xg = sp.gathered;
      dxg = sp.partial;
    }
    // The router: the weights' gradient, the load-balancing and z losses, through the softmax.
    const Acc scale = micro_batch_weight * layer_weight;
    std::vector<Acc> aux(r.aux_gradient.size());
    for (std::size_t e = 0; e < aux.size(); ++e) aux[e] = Acc(loss_weights.aux * r.aux_gradient[e]) * scale;
    Kokkos::deep_copy(exec, w.aux_gradient,
                      Kokkos::View<const Acc*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(aux.data(),
                                                                                                      aux.size()));
    exec.fence();  // `aux` is a temporary
    const Acc z = Acc(loss_weights.z * 2.0 / r.loss_tokens) * scale;
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::moe_combine(exec, d_home, pos, weight, dxg, /*weighted=*/false);  // moe_permute's backward
      kernels::moe_router_backward(exec, probs, lse, expert, weight, dw, w.aux_gradient, z, first_rows(w.dlogits, n));
      kernels::moe_router_linear_backward(exec, first_rows(w.dlogits, n), xg, router.value_matrix(),
                                          router.grad_matrix(), dxg, tp.rank() == 0);
    }
    if (sp.enabled())
      parallel::gather_from_sequence_parallel_region_backward_start(tp, exec, dxg, dx).wait_on(exec);
    else
      parallel::copy_to_tp_region_backward_start(tp, exec, dx).wait_on(exec);
  }

  // Zeroes the statistics (the trainer reads them once per logging interval).
  MoeStatistics take_statistics() {
    MoeStatistics s = stats;
    stats = {};
    stats.tokens_per_expert.assign(static_cast<std::size_t>(shape_.experts), 0);
    return s;
  }

 private:
  Scratch& allocated(Scratch& w) const {
    if (w.router_stats.extent(0) > 0) return w;
    util::MemoryCategoryScope as(util::MemoryCategory::workspace);
    const int E = shape_.experts;
    if (sp.enabled()) w.dy_gathered = kernels::Matrix<T>("moe.dy_gathered", tokens_, shape_.hidden);
    w.dweight = kernels::Matrix<Acc>("moe.dweight", tokens_, shape_.experts_per_token);
    w.dlogits = kernels::Matrix<Acc>("moe.dlogits", tokens_, E);
    w.router_stats = kernels::Vector<Acc>("moe.router_stats", E + 1);
    w.aux_gradient = kernels::Vector<Acc>("moe.aux_gradient", E);
    return w;
  }
  // The routes of the first n tokens (all of them in training; generation's new tokens).
  struct RouteViews {
    kernels::Matrix<Acc> probs;
    kernels::Vector<Acc> lse;
    Index expert, pos;
    kernels::Matrix<Acc> weight;
  };
  static RouteViews routes_of(const Routes& r, std::int64_t n) {
    const auto tokens = std::make_pair(std::int64_t(0), n);
    return {first_rows(r.probs, n), first_rows(r.lse, n), Kokkos::subview(r.expert, tokens, Kokkos::ALL()),
            Kokkos::subview(r.pos, tokens, Kokkos::ALL()), first_rows(r.weight, n)};
  }
  static kernels::Matrix<T> rows_of(const kernels::Matrix<T>& m, std::int64_t begin, std::int64_t end) {
    return Kokkos::subview(m, std::make_pair(begin, end), Kokkos::ALL());
  }
  std::int64_t received_rows(const Routes& r) const {
    std::int64_t n = 0;
    for (std::int64_t c : r.chunk_rows) n += c;
    return n;
  }

  // The positions of the copies sorted by expert (token order within an expert; beyond a
  // capacity dropped), on the host: the all-to-all's counts need them there, and the order is
  // then the same on every backend. Also the statistics and the load-balancing loss's f.
  void sort_copies(const Exec& exec, Routes& r, const Scratch& w, const Index& expert, const Index& pos,
                   std::int64_t n) {
    const int E = shape_.experts, k = shape_.experts_per_token;
    auto expert_h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), expert);
    auto stats_h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w.router_stats);
    std::vector<std::int64_t> routed(static_cast<std::size_t>(E), 0);
    for (std::int64_t t = 0; t < n; ++t)
      for (int j = 0; j < k; ++j) ++routed[static_cast<std::size_t>(expert_h(t, j))];
    const std::int64_t capacity = expert_capacity(n);
    std::vector<std::int64_t> offset(static_cast<std::size_t>(E) + 1, 0);
    for (int e = 0; e < E; ++e) offset[e + 1] = offset[e] + std::min(routed[e], capacity);
    r.kept = offset[E];
    auto pos_h = Kokkos::create_mirror_view(pos);
    std::vector<std::int64_t> next(static_cast<std::size_t>(E), 0);
    for (std::int64_t t = 0; t < n; ++t)
      for (int j = 0; j < k; ++j) {
        const int e = expert_h(t, j);
        const std::int64_t i = next[e]++;
        pos_h(t, j) = i < capacity ? static_cast<int>(offset[e] + i) : -1;
      }
    Kokkos::deep_copy(exec, pos, pos_h);
    exec.fence();  // pos_h is a temporary
    // Over the context group: the copies routed to each expert, the probability sums, the lse²
    // sum and the tokens, [E | E | 1 | 1].
    std::vector<double> sums(2 * static_cast<std::size_t>(E) + 2);
    for (int e = 0; e < E; ++e) {
      sums[e] = double(routed[e]);
      sums[E + e] = double(stats_h(e)) * double(n);
    }
    sums[2 * E] = double(stats_h(E));
    sums[2 * E + 1] = double(n);
    if (cp_) parallel::all_reduce_host(*cp_, sums, parallel::ReduceOp::sum);
    const double N = sums[2 * E + 1];
    r.loss_tokens = N;
    // f_e = routed_e / N; the loss E · Σ f_e P_e and its gradient E · f_e / N for every p(t, e).
    r.aux_gradient.assign(static_cast<std::size_t>(E), 0.0);
    double aux = 0;
    for (int e = 0; e < E; ++e) {
      aux += double(E) * (sums[e] / N) * (sums[E + e] / N);
      r.aux_gradient[e] = double(E) * sums[e] / N / N;
    }
    if (record) {
      stats.aux_loss_sum += aux;
      stats.z_loss_sum += sums[2 * E] / N;
      ++stats.samples;
      for (int e = 0; e < E; ++e) stats.tokens_per_expert[e] += routed[e];
      stats.dropped += n * k - r.kept;
    }
    // The all-to-all's counts: rows for each expert rank, and the rows each expert gets from each.
    const int El = shape_.local_experts();
    r.send_rows.assign(static_cast<std::size_t>(ep_size_), 0);
    std::vector<std::int64_t> per_expert(static_cast<std::size_t>(E));
    for (int e = 0; e < E; ++e) {
      per_expert[e] = offset[e + 1] - offset[e];
      r.send_rows[static_cast<std::size_t>(e / El)] += static_cast<std::size_t>(per_expert[e]);
    }
    r.chunk_rows = ep_ ? parallel::all_to_all_counts(*ep_, per_expert) : per_expert;
    r.recv_rows.assign(static_cast<std::size_t>(ep_size_), 0);
    for (int q = 0; q < ep_size_; ++q)
      for (int e = 0; e < El; ++e) r.recv_rows[q] += static_cast<std::size_t>(r.chunk_rows[q * El + e]);
  }

  // The copies an expert keeps of n tokens: ceil(c·k·n/E), or all of them (n·k) when dropless or
  // when the capacity is at least that (in double, so that a huge factor means dropless, not an
  // overflowed integer).
  std::int64_t expert_capacity(std::int64_t n) const {
    const std::int64_t copies = n * shape_.experts_per_token;
    if (!(shape_.moe_capacity_factor > 0)) return copies;
    const double capacity =
        std::ceil(shape_.moe_capacity_factor * double(shape_.experts_per_token) * double(n) / double(shape_.experts));
    return capacity < double(copies) ? static_cast<std::int64_t>(capacity) : copies;
  }

  // Rows [n, H] by rank: send_rows[r] rows to rank r, recv_rows[q] from rank q (elements = rows·H).
  void exchange(const Exec& exec, const kernels::Matrix<T>& send, const std::vector<std::size_t>& send_rows,
                const kernels::Matrix<T>& recv, const std::vector<std::size_t>& recv_rows) {
    PhaseScope phase(Phase::ep_comm);
    const auto H = static_cast<std::size_t>(shape_.hidden);
    std::vector<std::size_t> sc(send_rows.size()), rc(recv_rows.size());
    for (std::size_t q = 0; q < sc.size(); ++q) {
      sc[q] = send_rows[q] * H;
      rc[q] = recv_rows[q] * H;
    }
    parallel::iall_to_all(*ep_, exec, send, sc, recv, rc).wait_on(exec);
  }

  // f(local expert, first row, end row) for each chunk of received rows: by source rank, then expert.
  template <class F>
  void for_each_chunk(const Routes& r, F f) const {
    const int El = shape_.local_experts();
    std::int64_t begin = 0;
    for (int q = 0; q < (ep_ ? ep_size_ : 1); ++q)
      for (int e = 0; e < El; ++e) {
        const std::int64_t rows = r.chunk_rows[static_cast<std::size_t>(ep_ ? q * El + e : shape_.first_expert(ep_rank_) + e)];
        if (rows > 0) f(static_cast<std::size_t>(e), begin, begin + rows);
        begin += rows;
      }
  }
};

}  // namespace tptrain::model
