// The mixture-of-experts MLP (model.mlp = "moe"; Mixtral's MixtralSparseMoeBlock, Jiang et al.
// 2024; Switch Transformers, Fedus et al. 2021; Megatron-Core's MoELayer), in place of a block's
// dense MLP, in Megatron-Core's three parts:
//   the router (moe_router.hpp):             logits = x · Wrᵀ (fp32), p = softmax over E, the top k
//                                            renormalised to w (sum 1), and its losses;
//   the token dispatcher (moe_token_dispatcher.hpp): each token's k copies sorted by expert and
//                                            sent to the experts' ranks by all-to-all, the outputs
//                                            brought back, weighted, summed and reduced over tensor;
//   the experts:                             E SwiGLU MLPs (swiglu_mlp.hpp, SwigluMlp::expert),
//                                            each run once per source rank's run of rows:
//                                            y[t] = Σ_j w_j · down_e(silu(gate_e x) · up_e x);
//   the shared experts (DeepSeekMoE):        one SwiGLU of n_s·F_e on every token, its output
//                                            added to the routed ones' unweighted (DeepSeek-V3
//                                            eq. 12), inside the same reduction over tensor.
// Tensor parallelism splits each expert as the dense SwiGLU is (gate|up column-parallel, down
// row-parallel) and replicates the router; the dispatcher gathers the tokens at the entry and
// reduces the weighted sum at the exit. In the backward the weights' gradient <dy, out_e> is a
// partial sum over the tensor group and is all-reduced (N·k values), after which the router's
// backward is identical on every tensor rank; its input gradient is added on tensor rank 0 only,
// before the input gradient's reduction. Expert parameters are summed and sharded over the
// expert-data group (src/model/gpt_model.hpp: their own buckets).
//
// The losses are computed per block over the micro-batch's tokens and averaged over the blocks;
// loss_weights says how much they weigh.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "src/model/spec/block_descriptor.hpp"
#include "src/model/spec/gpt_shape.hpp"
#include "src/model/linear.hpp"
#include "src/model/moe_router.hpp"
#include "src/model/moe_token_dispatcher.hpp"
#include "src/model/spec/moe_kind.hpp"
#include "src/model/sublayer.hpp"
#include "src/model/swiglu_mlp.hpp"
#include "src/model/workspace.hpp"

namespace tptrain::model {

template <class T>
struct MixtureOfExperts final : MlpSublayer<T> {
  using Matrix = kernels::Matrix<T>;
  using Acc = kx::acc_t<T>;
  using Router = TopKRouter<T>;
  using Dispatcher = AllToAllTokenDispatcher<T>;

  // What forward keeps for backward, one set per micro-batch in flight.
  struct Routes {
    typename Router::Routing routing;        // probabilities, lse, chosen experts and weights [N, ...]
    typename Router::LossGradients losses;   // the losses' gradient factors
    typename Dispatcher::Routes copies;      // where each token's copies went
    // The rows of the experts: received [R, H], their gate|up [R, 2F/t], outputs back home [kept, H]
    GrowingRows<T> expert_in, expert_h, expert_out_home;
    kernels::Matrix<T> shared_h;  // [N, 2·n_s·F_e/t]: the shared experts' gate|up (none without them)
  };
  using Saved = std::shared_ptr<Routes>;

  Saved make_saved(const std::string& name) const {
    auto r = std::make_shared<Routes>();
    util::MemoryCategoryScope as(util::MemoryCategory::activations);
    const int E = shape_.experts, k = shape_.experts_per_token;
    r->routing.probs = kernels::Matrix<Acc>(name + ".router_probs", tokens_, E);
    r->routing.lse = kernels::Vector<Acc>(name + ".router_lse", tokens_);
    r->routing.expert = typename Router::Index(name + ".route_expert", tokens_, k);
    r->copies.row = typename Dispatcher::Index(name + ".route_row", tokens_, k);
    r->routing.weight = kernels::Matrix<Acc>(name + ".route_weight", tokens_, k);
    const std::int64_t balanced = tokens_ * k;
    r->expert_in = GrowingRows<T>(name + ".expert_in", shape_.hidden, balanced);
    r->expert_h = GrowingRows<T>(name + ".expert_h", 2 * std::int64_t(shape_.local_expert_ffn()), balanced);
    r->expert_out_home = GrowingRows<T>(name + ".expert_out", shape_.hidden, balanced);
    if (shared) r->shared_h = kernels::Matrix<T>(name + ".shared_h", tokens_, 2 * shape_.local_shared_ffn());
    return r;
  }

  GptShape shape_;
  std::int64_t tokens_;  // N: the micro-batch's tokens (all of them with sequence parallelism)
  Router router;
  Dispatcher dispatcher;
  std::vector<SwigluMlp<T>> experts;  // the rank's experts
  std::optional<SwigluMlp<T>> shared; // the shared experts (model.moe_shared_experts > 0), on every rank
  Saved saved;
  MoeLossWeights loss_weights;   // the specification's coefficients; 0: the losses add no gradient
  Acc micro_batch_weight = 0;    // the gradient weight of this micro-batch's mean losses (GptModel::backward)
  Acc layer_weight = 1;          // 1 / layers: the losses are averaged over the blocks
  bool record = true;            // add this forward's routing to the statistics (not a recomputation)
  MoeStatistics stats;
  std::vector<std::int64_t> step_load;  // [E]: copies routed since the balancing last took them
  std::optional<std::vector<std::int64_t>> received_log;  // keep_received_rows: rows received per forward
  // Scratch of the routed rows and the router, shared by the micro-batches and (GptModel) by the
  // stage's blocks, allocated at the first forward: like the routed rows it lives outside the
  // workspace (the planner counts it, src/plan/activation_memory.cpp).
  struct Scratch {
    GrowingRows<T> sorted, act, d_act, d_h, expert_out, d_rows, d_in;
    kernels::Matrix<T> dy_gathered;                 // [N, H] with sequence parallelism
    // The shared experts': activation (then its gradient) [N, n_s·F_e/t], gate|up's gradient
    // [N, 2·n_s·F_e/t], output (then input gradient) [N, H].
    kernels::Matrix<T> shared_act, shared_dh, shared_out;
    kernels::Matrix<Acc> dweight, dlogits;          // [N, k], [N, E]
    kernels::Vector<Acc> router_sums, aux_gradient; // [G·E + 1], [G·E]: G groups of tokens (TopKRouter::groups)
  };
  std::shared_ptr<Scratch> scratch;

  MixtureOfExperts(const std::string& name, const GptShape& s, std::int64_t tokens, const Communicator& tp,
                   Workspace<T>& ws, int ep_rank, const SavedPlacement& placement = {})
      : shape_(s), tokens_(tokens),
        router(block_parameter(s, name + "/router/weight"), s, tp,
               has_expert_bias(s) ? std::optional<ParameterSpec>(block_parameter(s, name + "/router/expert_bias"))
                                  : std::nullopt),
        dispatcher(s, tokens, ws, ep_rank), layer_weight(Acc(1) / Acc(s.layers - s.moe_dense_layers)) {
    for (int e = first_expert(s, ep_rank); e < first_expert(s, ep_rank) + local_experts(s); ++e) {
      const std::string expert = name + "/experts/" + std::to_string(e);
      experts.push_back(SwigluMlp<T>::expert(block_parameter(s, expert + "/fc/weight"),
                                               block_parameter(s, expert + "/proj/weight"), tp));
    }
    if (s.moe_shared_experts > 0)
      shared.emplace(SwigluMlp<T>::expert(block_parameter(s, name + "/shared_experts/fc/weight"),
                                          block_parameter(s, name + "/shared_experts/proj/weight"), tp));
    saved = make_saved(placement.name_for(name));
    loss_weights = {s.moe_aux_loss_coeff, s.moe_z_loss_coeff};
    const std::int64_t H = s.hidden, f = s.local_expert_ffn();
    // Allocated at first use: a model gives its blocks the first block's (GptModel).
    scratch = std::make_shared<Scratch>();
    Scratch& w = *scratch;
    w.sorted = GrowingRows<T>("moe.sorted", H, 0);
    w.act = GrowingRows<T>("moe.a", f, 0);
    w.d_act = GrowingRows<T>("moe.da", f, 0);
    w.d_h = GrowingRows<T>("moe.dh", 2 * f, 0);
    w.expert_out = GrowingRows<T>("moe.expert_out", H, 0);
    w.d_rows = GrowingRows<T>("moe.d_rows", H, 0);
    w.d_in = GrowingRows<T>("moe.d_in", H, 0);
    stats.tokens_per_expert.assign(static_cast<std::size_t>(s.experts), 0);
    step_load.assign(static_cast<std::size_t>(s.experts), 0);
  }

  void bind_expert_group(Communicator& ep) override { dispatcher.bind_expert_group(ep); }
  // The group over which the losses' statistics are summed (GptModel::bind_context).
  void bind_context_group(Communicator& cp) override { router.cp_ = cp.size() > 1 ? &cp : nullptr; }

  // The router, the shared experts, then each local expert's gate|up and down: the block
  // descriptor's order.
  std::vector<Parameter<T>*> parameters() override {
    std::vector<Parameter<T>*> ps{&router.weight};
    if (router.bias) ps.push_back(&*router.bias);
    if (shared)
      for (Parameter<T>* p : shared->parameters()) ps.push_back(p);
    for (SwigluMlp<T>& e : experts)
      for (Parameter<T>* p : e.parameters()) ps.push_back(p);
    return ps;
  }
  // Whether p is an expert's (summed over the expert-data group, not the data group).
  bool is_expert_parameter(const Parameter<T>* p) const override { return expert_of_row(row_of(p->name)) >= 0; }
  static std::string row_of(const std::string& name) {
    const std::size_t at = name.find("mlp/");
    return at == std::string::npos ? name : name.substr(at);
  }

  // y [rows, H] = the mixture's output for x [rows, H] (rows = N, or N/t with sequence parallelism;
  // fewer without it: generation's new tokens).
  void forward(const Exec& exec, Communicator& tp, const Matrix& x, const Matrix& y, bool = true) override {
    Routes& r = *saved;
    Scratch& w = allocated(*scratch);
    dispatcher.require_expert_group();
    const kernels::Matrix<T> tokens = dispatcher.gather_tokens(exec, tp, x);
    const auto routing = routing_of(r, tokens.extent(0));
    router.forward(exec, tokens, routing, w.router_sums);
    dispatcher.sort(exec, r.copies, routing.expert, router.group_rows(tokens.extent(0)));
    record_losses(r, tokens.extent(0), w);
    const std::int64_t received = dispatcher.received_rows(r.copies);
    if (record && received_log) received_log->push_back(received);
    const kernels::Matrix<T> in = r.expert_in.rows(received);
    dispatcher.dispatch(exec, tokens, r.copies, w.sorted.rows(r.copies.kept), in);
    const kernels::Matrix<T> h = r.expert_h.rows(received), act = w.act.rows(received);
    const kernels::Matrix<T> out =
        dispatcher.exchanges() ? w.expert_out.rows(received) : r.expert_out_home.rows(r.copies.kept);
    dispatcher.for_each_received_run(r.copies, [&](std::size_t e, std::int64_t begin, std::int64_t end) {
      experts[e].forward_rows(exec, tp, rows_of(in, begin, end), rows_of(h, begin, end), rows_of(act, begin, end),
                              rows_of(out, begin, end));
    });
    const kernels::Matrix<T> shared_out = shared_forward(exec, tp, r, w, tokens);
    dispatcher.combine(exec, tp, out, r.copies, r.expert_out_home.rows(r.copies.kept), routing.weight, y, shared_out);
  }

  // dx [rows, H] (overwritten) from dy [rows, H]; x is the forward's input.
  void backward(const Exec& exec, Communicator& tp, const Matrix& dy, const Matrix& x, const Matrix& dx) override {
    Routes& r = *saved;
    Scratch& w = allocated(*scratch);
    const std::int64_t n = r.copies.tokens, kept = r.copies.kept;
    const auto routing = routing_of(r, n);
    const kernels::Matrix<Acc> dweight = first_rows(w.dweight, n);
    // Through the weighted sum: each copy's output gradient, and the weights'.
    const kernels::Matrix<T> d_sorted = dispatcher.exchanges() ? w.d_rows.rows(kept) : w.d_in.rows(kept);
    dispatcher.combine_backward(exec, tp, dy, w.dy_gathered, r.expert_out_home.rows(kept), r.copies, routing.weight,
                                d_sorted, dweight);
    // To the experts, as the forward's dispatch; each expert's backward turns d_out's rows into
    // its rows' input gradients.
    const std::int64_t received = dispatcher.received_rows(r.copies);
    const kernels::Matrix<T> in = r.expert_in.rows(received);
    const kernels::Matrix<T> d_out = dispatcher.exchanges() ? w.d_in.rows(received) : d_sorted;
    dispatcher.send_to_experts(exec, d_sorted, r.copies, d_out);
    const kernels::Matrix<T> h = r.expert_h.rows(received), act = w.act.rows(received),
                             d_act = w.d_act.rows(received), d_h = w.d_h.rows(received);
    dispatcher.for_each_received_run(r.copies, [&](std::size_t e, std::int64_t begin, std::int64_t end) {
      const auto d_o = rows_of(d_out, begin, end);
      experts[e].backward_rows(exec, tp, d_o, rows_of(in, begin, end), rows_of(h, begin, end),
                               rows_of(act, begin, end), rows_of(d_act, begin, end), rows_of(d_h, begin, end), d_o);
    });
    // The input gradients home, summed over each token's copies (a partial sum over tensor).
    const kernels::Matrix<T> d_home = dispatcher.exchanges() ? w.d_rows.rows(kept) : d_out;
    dispatcher.return_from_experts(exec, d_out, r.copies, d_home);
    const kernels::Matrix<T> tokens = dispatcher.gather_tokens(exec, tp, x);
    const kernels::Matrix<T> dx_all = dispatcher.sp.enabled() ? dispatcher.sp.partial : kernels::Matrix<T>(dx);
    const kernels::Matrix<T> shared_dx =
        shared_backward(exec, tp, r, w, dispatcher.sp.enabled() ? w.dy_gathered : dy, tokens);
    dispatcher.unpermute(exec, d_home, r.copies, routing.weight, dx_all, shared_dx);
    // The router: the weights' gradient and the losses', through the softmax, added to dx_all.
    router.backward(exec, tp, routing, dweight, r.losses, loss_weights, micro_batch_weight * layer_weight,
                    first_rows(w.aux_gradient, router.groups(n) * shape_.experts), first_rows(w.dlogits, n), tokens,
                    dx_all);
    dispatcher.reduce_input_gradient(exec, tp, dx_all, dx);
  }

  // Zeroes the statistics (the trainer reads them once per logging interval).
  MoeStatistics take_statistics() {
    MoeStatistics s = stats;
    stats = {};
    stats.tokens_per_expert.assign(static_cast<std::size_t>(shape_.experts), 0);
    return s;
  }
  // ... as the sums its kind's metrics read (moe_kind.hpp, moe_metrics).
  void take_statistics(StatisticSums& sums) override {
    const MoeStatistics s = take_statistics();
    sums.at("moe.aux_loss_sum", 1)[0] += s.aux_loss_sum;
    sums.at("moe.z_loss_sum", 1)[0] += s.z_loss_sum;
    sums.at("moe.samples", 1)[0] += double(s.samples);
    sums.at("moe.dropped", 1)[0] += double(s.dropped);
    std::vector<double>& load = sums.at("moe.tokens_per_expert", s.tokens_per_expert.size());
    for (std::size_t e = 0; e < s.tokens_per_expert.size(); ++e) load[e] += double(s.tokens_per_expert[e]);
  }
  void count_statistics(bool on) override { record = on; }
  void set_auxiliary_loss_scale(Acc micro_batch_weight_) override { micro_batch_weight = micro_batch_weight_; }
  // The first block's scratch, and with recompute = full its routes (GptModel).
  void share_stage_buffers(const MlpSublayer<T>& first, bool saved_too) override {
    const auto& other = dynamic_cast<const MixtureOfExperts&>(first);
    scratch = other.scratch;
    if (saved_too) saved = other.saved;
  }

  std::shared_ptr<SublayerSaved> saved_set() const override { return box_saved(saved); }
  std::shared_ptr<SublayerSaved> make_saved_set(Workspace<T>&, const std::string& prefix, BufferCategory) const override {
    return box_saved(make_saved(prefix));
  }
  void bind(const std::shared_ptr<SublayerSaved>& s) override { saved = unbox_saved<Saved>(s); }

 private:
  Scratch& allocated(Scratch& w) const {
    if (w.router_sums.extent(0) > 0) return w;
    util::MemoryCategoryScope as(util::MemoryCategory::workspace);
    const int E = shape_.experts;
    if (dispatcher.sp.enabled()) w.dy_gathered = kernels::Matrix<T>("moe.dy_gathered", tokens_, shape_.hidden);
    w.dweight = kernels::Matrix<Acc>("moe.dweight", tokens_, shape_.experts_per_token);
    w.dlogits = kernels::Matrix<Acc>("moe.dlogits", tokens_, E);
    const std::int64_t groups = router.groups(tokens_);
    w.router_sums = kernels::Vector<Acc>("moe.router_stats", groups * E + 1);
    w.aux_gradient = kernels::Vector<Acc>("moe.aux_gradient", groups * E);
    if (shared) {
      const std::int64_t fs = shape_.local_shared_ffn();
      w.shared_act = kernels::Matrix<T>("moe.shared_a", tokens_, fs);
      w.shared_dh = kernels::Matrix<T>("moe.shared_dh", tokens_, 2 * fs);
      w.shared_out = kernels::Matrix<T>("moe.shared_out", tokens_, shape_.hidden);
    }
    return w;
  }
  // The shared experts' output on the n (gathered) tokens, a partial sum over tensor as the
  // routed experts' are (empty: none); and its backward from dy of the n tokens, their input
  // gradient (a partial sum) in the same scratch.
  kernels::Matrix<T> shared_forward(const Exec& exec, Communicator& tp, Routes& r, const Scratch& w,
                                    const kernels::Matrix<T>& tokens) {
    if (!shared) return {};
    const std::int64_t n = tokens.extent(0);
    const kernels::Matrix<T> out = first_rows(w.shared_out, n);
    shared->forward_rows(exec, tp, tokens, first_rows(r.shared_h, n), first_rows(w.shared_act, n), out);
    return out;
  }
  kernels::Matrix<T> shared_backward(const Exec& exec, Communicator& tp, Routes& r, const Scratch& w,
                                     const kernels::Matrix<T>& dy, const kernels::Matrix<T>& tokens) {
    if (!shared) return {};
    const std::int64_t n = tokens.extent(0);
    const kernels::Matrix<T> act = first_rows(w.shared_act, n), dx = first_rows(w.shared_out, n);
    shared->backward_rows(exec, tp, first_rows(dy, n), tokens, first_rows(r.shared_h, n), act, act,
                          first_rows(w.shared_dh, n), dx);
    return dx;
  }
  // The routing of the first n tokens (all of them in training; generation's new tokens).
  static typename Router::Routing routing_of(const Routes& r, std::int64_t n) {
    const auto tokens = std::make_pair(std::int64_t(0), n);
    return {first_rows(r.routing.probs, n), first_rows(r.routing.lse, n),
            Kokkos::subview(r.routing.expert, tokens, Kokkos::ALL()), first_rows(r.routing.weight, n)};
  }
  static kernels::Matrix<T> rows_of(const kernels::Matrix<T>& m, std::int64_t begin, std::int64_t end) {
    return Kokkos::subview(m, std::make_pair(begin, end), Kokkos::ALL());
  }
  // The router's losses of this forward's n tokens, and the statistics.
  void record_losses(Routes& r, std::int64_t n, const Scratch& w) {
    auto sums_h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w.router_sums);
    const typename Router::Losses l = router.losses(r.copies.routed_by_group, sums_h, n, r.losses);
    if (!record) return;
    stats.aux_loss_sum += l.aux;
    stats.z_loss_sum += l.z;
    ++stats.samples;
    for (int e = 0; e < shape_.experts; ++e) stats.tokens_per_expert[e] += r.copies.routed[e];
    stats.dropped += r.copies.dropped;
    if (router.bias)
      for (int e = 0; e < shape_.experts; ++e) step_load[e] += r.copies.routed[e];
  }

 public:
  // The balancing of the router's bias (GptModel::balance_expert_biases).
  Parameter<T>* expert_bias_parameter() override { return router.bias ? &*router.bias : nullptr; }
  void keep_received_rows(bool on) override {
    if (on && !received_log) received_log.emplace();
    if (!on) received_log.reset();
  }
  std::vector<std::int64_t> take_received_rows() override {
    if (!received_log) return {};
    return std::exchange(*received_log, {});
  }
  std::vector<std::int64_t> take_expert_load() override {
    std::vector<std::int64_t> out = step_load;
    std::fill(step_load.begin(), step_load.end(), 0);
    return out;
  }
  std::vector<Acc> expert_bias() const override {
    std::vector<Acc> out(router.expert_bias.extent(0));
    Kokkos::deep_copy(Kokkos::View<Acc*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(out.data(),
                                                                                                    out.size()),
                      router.expert_bias);
    return out;
  }
  void set_expert_bias(const std::vector<Acc>& b) override {
    Kokkos::deep_copy(router.expert_bias,
                      Kokkos::View<const Acc*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(b.data(),
                                                                                                          b.size()));
  }
};

}  // namespace tptrain::model
