// One block, pre-norm:  after_attention = x + attn(ln_1(x));  y = after_attention + mlp(ln_2(after_attention)), of the shape's block
// specification (base/block_spec.hpp; docs/design.md, "The block specification"): LayerNorm or
// RMSNorm, learned or rotary positions, GELU or SwiGLU MLP or a mixture of SwiGLU experts
// (mixture_of_experts.hpp), the biases it holds.
// With sequence parallelism x, y, the LayerNorms and the residual adds work on this rank's
// [n, H] tokens (n = N/t) and the attention and MLP gather and reduce-scatter them
// (Korthikanti et al. 2022, Figure 5). Its parameters and buffers are the rows of the block
// descriptor (src/model/block_descriptor.hpp).
#pragma once

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kokkos_kernels/bias.hpp"
#include "kokkos_kernels/launch_count.hpp"
#include "src/model/block_descriptor.hpp"
#include "src/model/layer_norm.hpp"
#include "src/model/mixture_of_experts.hpp"
#include "src/model/parallel_attention.hpp"
#include "src/model/parallel_mlp.hpp"
#include "src/model/recompute.hpp"

namespace tptrain::model {

template <class T>
struct TransformerLayer {
  // Everything forward keeps for backward (besides the block input x, which the caller keeps):
  // one set per micro-batch in flight, or with recompute = full one set shared by every block.
  struct Saved {
    typename LayerNorm<T>::Saved ln_1, ln_2;
    typename ParallelAttention<T>::Saved attn;
    typename ParallelMLP<T>::Saved mlp;
    typename MixtureOfExperts<T>::Saved moe;  // model.mlp = moe (mlp then empty)
    kernels::Matrix<T> attn_input, after_attention, mlp_input;  // [rows, H]: ln_1(x), x + attention, ln_2 of that
  };

  LayerNorm<T> ln_1;
  ParallelAttention<T> attn;
  LayerNorm<T> ln_2;
  std::optional<ParallelMLP<T>> mlp;       // the dense MLP (model.mlp = gelu, swiglu), or
  std::optional<MixtureOfExperts<T>> moe;  // the mixture of experts (model.mlp = moe)
  kernels::Matrix<T> attn_input, after_attention, mlp_input;  // [rows, H] of the bound Saved set (bind)
  kernels::Matrix<T> sublayer_out;  // [rows, H] shared scratch: attention, then MLP output before its residual add
  kernels::Matrix<T> grad_sublayer_input, grad_after_attention;  // [rows, H] shared backward scratch
  std::int64_t tokens_, rows_;  // N = micro_batch * local_seq_length; rows = N, or N/t with sequence parallelism
  GptShape shape_;
  std::string name_;            // "layers/<i>"
  int ep_rank_ = 0;

  // recompute = full: every block of the stage keeps its Saved buffers in one shared scratch set.
  // ep_rank: the rank's place in the expert group (a mixture of experts holds its experts only).
  TransformerLayer(const std::string& name, const GptShape& s, int batch, const Communicator& tp, Workspace<T>& ws,
                   Recompute recompute = Recompute::selective, int ep_rank = 0)
      : TransformerLayer(name, s, batch, tp, ws, recompute,
                         recompute == Recompute::full ? SavedPlacement{"recompute.block", BufferCategory::scratch}
                                                      : SavedPlacement{name, BufferCategory::activation},
                         ep_rank) {}

  TransformerLayer(const std::string& name, const GptShape& s, int batch, const Communicator& tp, Workspace<T>& ws,
                   Recompute recompute, const SavedPlacement& placement, int ep_rank = 0)
      : ln_1(make_norm<T>(s, block_spec(s), name + "/ln_1", tp, s.sequence_rows(tokens(s, batch)), ws,
                          tokens(s, batch), SavedPlacement{placement.prefix + "/ln_1", placement.category})),
        attn(name + "/attn", s, batch, tp, ws, recompute, SavedPlacement{placement.prefix + "/attn", placement.category}),
        ln_2(make_norm<T>(s, block_spec(s), name + "/ln_2", tp, s.sequence_rows(tokens(s, batch)), ws,
                          tokens(s, batch), SavedPlacement{placement.prefix + "/ln_2", placement.category})),
        attn_input(ws.matrix(placement.prefix + ".attn_input", placement.category, s.sequence_rows(tokens(s, batch)), s.hidden)),
        after_attention(ws.matrix(placement.prefix + ".after_attention", placement.category, s.sequence_rows(tokens(s, batch)), s.hidden)),
        mlp_input(ws.matrix(placement.prefix + ".mlp_input", placement.category, s.sequence_rows(tokens(s, batch)), s.hidden)),
        sublayer_out(ws.matrix("block.sublayer_out", BufferCategory::scratch, s.sequence_rows(tokens(s, batch)), s.hidden)),
        grad_sublayer_input(ws.matrix("block.grad_sublayer_input", BufferCategory::scratch, s.sequence_rows(tokens(s, batch)), s.hidden)),
        grad_after_attention(ws.matrix("block.grad_after_attention", BufferCategory::scratch, s.sequence_rows(tokens(s, batch)), s.hidden)),
        tokens_(tokens(s, batch)), rows_(s.sequence_rows(tokens_)), shape_(s), name_(name), ep_rank_(ep_rank) {
    const SavedPlacement mlp_placement{placement.prefix + "/mlp", placement.category};
    if (s.moe()) moe.emplace(name + "/mlp", s, tokens_, tp, ws, ep_rank, mlp_placement);
    else mlp.emplace(name + "/mlp", s, tokens_, tp, ws, mlp_placement);
    (void)parameters();  // a parameter without a descriptor row, or a row without its parameter, fails here
  }

  static std::int64_t tokens(const GptShape& s, int batch) { return std::int64_t(batch) * s.local_seq_length(); }
  static auto block_spec(const GptShape& s) {
    return [&s](const std::string& name) { return block_parameter(s, name); };
  }

  // The set the constructor allocated (what the layer is bound to first).
  Saved current() const {
    return {ln_1.saved, ln_2.saved, attn.saved, mlp ? mlp->saved : typename ParallelMLP<T>::Saved{},
            moe ? moe->saved : nullptr, attn_input, after_attention, mlp_input};
  }
  // Another set, named `prefix` + buffer name, in category c.
  Saved make_saved(Workspace<T>& ws, const std::string& prefix, BufferCategory cat) const {
    return {LayerNorm<T>::make_saved(ws, prefix + "/ln_1", rows_, cat, shape_.rms()),
            LayerNorm<T>::make_saved(ws, prefix + "/ln_2", rows_, cat, shape_.rms()),
            attn.make_saved(ws, prefix + "/attn", cat),
            mlp ? ParallelMLP<T>::make_saved(ws, prefix + "/mlp", tokens_, shape_, cat) : typename ParallelMLP<T>::Saved{},
            moe ? moe->make_saved(prefix + "/mlp") : nullptr,
            ws.matrix(prefix + ".attn_input", cat, rows_, shape_.hidden),
            ws.matrix(prefix + ".after_attention", cat, rows_, shape_.hidden),
            ws.matrix(prefix + ".mlp_input", cat, rows_, shape_.hidden)};
  }
  void bind(const Saved& s) {
    ln_1.saved = s.ln_1;
    ln_2.saved = s.ln_2;
    attn.saved = s.attn;
    if (mlp) mlp->saved = s.mlp;
    if (moe) moe->saved = s.moe;
    attn_input = s.attn_input;
    after_attention = s.after_attention;
    mlp_input = s.mlp_input;
  }

  // Every parameter of the block once, in the descriptor's order (block_parameter_rows): the
  // checkpoint's and the bucket's. Throws std::logic_error when the sublayers hold a parameter
  // the descriptor lacks or lack one it lists.
  std::vector<Parameter<T>*> parameters() {
    std::vector<Parameter<T>*> held;
    for (const std::vector<Parameter<T>*>& part :
         {ln_1.parameters(), attn.parameters(), ln_2.parameters(), mlp ? mlp->parameters() : moe->parameters()})
      held.insert(held.end(), part.begin(), part.end());
    std::vector<Parameter<T>*> ordered;
    const std::string prefix = name_ + "/";
    for (const ParameterRow& row : block_parameter_rows(shape_)) {
      if (!held_by_expert_rank(shape_, row.name, ep_rank_)) continue;  // another expert rank's expert
      const auto it =
          std::find_if(held.begin(), held.end(), [&](const Parameter<T>* p) { return p->name == prefix + row.name; });
      if (it == held.end())
        throw std::logic_error("tptrain: the block descriptor lists " + prefix + row.name +
                               ", which no sublayer of the block holds (src/model/transformer_layer.hpp)");
      ordered.push_back(*it);
    }
    if (ordered.size() != held.size())
      throw std::logic_error("tptrain: block " + name_ + " holds " + std::to_string(held.size()) +
                             " parameters, the block descriptor lists " + std::to_string(ordered.size()) +
                             " (src/model/block_descriptor.hpp)");
    return ordered;
  }

  // ---- what the model asks of every block, whatever kinds it holds ----------------------------
  // (today the mixture of experts is the only kind that needs any of it)

  // The groups a kind computes over besides the tensor group: the expert-parallel group (a
  // mixture's all-to-all; null: parallel.expert = 1) and the context group (ring attention, a
  // mixture's loss sums).
  void bind_expert_group(Communicator* ep) {
    if (moe && ep != nullptr) moe->bind_expert_group(*ep);
  }
  void bind_context_group(Communicator& cp) {
    attn.bind_context(cp);
    if (moe) moe->bind_context_group(cp);
  }
  // The scratch the stage's blocks share, and with recompute = full their one saved set: the
  // first block's.
  void share_stage_buffers(const TransformerLayer& first, bool saved_too) {
    if (!moe) return;
    moe->scratch = first.moe->scratch;
    if (saved_too) moe->saved = first.moe->saved;
  }
  // Auxiliary losses (a mixture's load balancing and z-loss): their coefficients, and the
  // gradient weight of this micro-batch's mean losses.
  void set_auxiliary_loss_weights(const MoeLossWeights& w) {
    if (moe) moe->loss_weights = w;
  }
  void set_auxiliary_loss_scale(kx::acc_t<T> micro_batch_weight) {
    if (moe) moe->micro_batch_weight = micro_batch_weight;
  }
  // Whether forwards add to the statistics (not a recomputation, not an evaluation), and the
  // statistics since the last call, added to s.
  void count_statistics(bool on) {
    if (moe) moe->record = on;
  }
  void take_statistics(MoeStatistics& s) {
    if (moe) s.add(moe->take_statistics());
  }
  // Whether parameter p is summed over the expert-data group (a mixture's expert), not the data group.
  static bool is_expert_parameter(const Parameter<T>* p) { return MixtureOfExperts<T>::is_expert_parameter(p); }

  // Launch-count sites (kernels/launch_count.hpp): a bench reports launches per layer forward
  // and per layer backward from them.
  static constexpr int forward_site = 1, backward_site = 2;

  // The one forward of the block, for training, evaluation and generation: with a cache step
  // (kv_cache.hpp) x holds generation's n new rows of one sequence, computed in the leading rows
  // of the block's buffers, its attention over the cached positions.
  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x /*[rows, H]*/, const YV& y /*[rows, H]*/,
               const CacheStep<T>* step = nullptr) {
    kernels::launch_count::SiteScope site(forward_site);
    const auto n = static_cast<std::int64_t>(x.extent(0));
    const kernels::Matrix<T> attn_input_n = first_rows(attn_input, n), after_attention_n = first_rows(after_attention, n), mlp_input_n = first_rows(mlp_input, n),
                             sublayer_out_n = first_rows(sublayer_out, n);
    ln_1.forward(exec, x, attn_input_n);
    attn.forward(exec, tp, attn_input_n, sublayer_out_n, /*add_proj_bias=*/false, step);
    // after_attention = x + attention, mlp_input = ln_2(after_attention); without linear biases the
    // projection has none to add
    if (attn.proj.has_bias) ln_2.forward_add_bias(exec, x, sublayer_out_n, attn.proj.bias.value_vector(), after_attention_n, mlp_input_n);
    else ln_2.forward_add(exec, x, sublayer_out_n, after_attention_n, mlp_input_n);
    if (moe) moe->forward(exec, tp, mlp_input_n, sublayer_out_n);
    else mlp->forward(exec, tp, mlp_input_n, sublayer_out_n, /*add_proj_bias=*/false);
    PhaseScope phase(Phase::norms_elementwise);
    if (mlp && mlp->proj.has_bias)
      kernels::bias_residual_add(exec, after_attention_n, sublayer_out_n, mlp->proj.bias.value_vector(), y);
    else kernels::add(exec, after_attention_n, sublayer_out_n, y);
  }

  // dx = dL/dx from dy = dL/dy (dx overwritten).
  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy, const XV& x, const DXV& dx) {
    kernels::launch_count::SiteScope site(backward_site);
    if (moe) moe->backward(exec, tp, dy, mlp_input, grad_sublayer_input);
    else mlp->backward(exec, tp, dy, mlp_input, grad_sublayer_input);
    ln_2.backward_add(exec, grad_sublayer_input, after_attention, dy, grad_after_attention);  // through ln_2 plus the residual path
    attn.backward(exec, tp, grad_after_attention, attn_input, grad_sublayer_input);
    ln_1.backward_add(exec, grad_sublayer_input, x, grad_after_attention, dx);
  }
};

}  // namespace tptrain::model
