// One block, pre-norm:  x1 = x + attn(ln_1(x));  y = x1 + mlp(ln_2(x1)), of the shape's block
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
    kernels::Matrix<T> a, x1, c;  // [rows, H]: ln_1 out, residual after attention, ln_2 out
  };

  LayerNorm<T> ln_1;
  ParallelAttention<T> attn;
  LayerNorm<T> ln_2;
  std::optional<ParallelMLP<T>> mlp;       // the dense MLP (model.mlp = gelu, swiglu), or
  std::optional<MixtureOfExperts<T>> moe;  // the mixture of experts (model.mlp = moe)
  kernels::Matrix<T> a, x1, c;  // [rows, H] of the bound Saved set (bind)
  kernels::Matrix<T> out;       // [rows, H] shared scratch: attention, then MLP output before its residual add
  kernels::Matrix<T> g1, g2;    // [rows, H] shared backward scratch
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
        a(ws.matrix(placement.prefix + ".a", placement.category, s.sequence_rows(tokens(s, batch)), s.hidden)),
        x1(ws.matrix(placement.prefix + ".x1", placement.category, s.sequence_rows(tokens(s, batch)), s.hidden)),
        c(ws.matrix(placement.prefix + ".c", placement.category, s.sequence_rows(tokens(s, batch)), s.hidden)),
        out(ws.matrix("block.out", BufferCategory::scratch, s.sequence_rows(tokens(s, batch)), s.hidden)),
        g1(ws.matrix("block.grad_1", BufferCategory::scratch, s.sequence_rows(tokens(s, batch)), s.hidden)),
        g2(ws.matrix("block.grad_2", BufferCategory::scratch, s.sequence_rows(tokens(s, batch)), s.hidden)),
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
            moe ? moe->saved : nullptr, a, x1, c};
  }
  // Another set, named `prefix` + buffer name, in category c.
  Saved make_saved(Workspace<T>& ws, const std::string& prefix, BufferCategory cat) const {
    return {LayerNorm<T>::make_saved(ws, prefix + "/ln_1", rows_, cat, shape_.rms()),
            LayerNorm<T>::make_saved(ws, prefix + "/ln_2", rows_, cat, shape_.rms()),
            attn.make_saved(ws, prefix + "/attn", cat),
            mlp ? ParallelMLP<T>::make_saved(ws, prefix + "/mlp", tokens_, shape_, cat) : typename ParallelMLP<T>::Saved{},
            moe ? moe->make_saved(prefix + "/mlp") : nullptr,
            ws.matrix(prefix + ".a", cat, rows_, shape_.hidden),
            ws.matrix(prefix + ".x1", cat, rows_, shape_.hidden),
            ws.matrix(prefix + ".c", cat, rows_, shape_.hidden)};
  }
  void bind(const Saved& s) {
    ln_1.saved = s.ln_1;
    ln_2.saved = s.ln_2;
    attn.saved = s.attn;
    if (mlp) mlp->saved = s.mlp;
    if (moe) moe->saved = s.moe;
    a = s.a;
    x1 = s.x1;
    c = s.c;
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
    const kernels::Matrix<T> a_n = first_rows(a, n), x1_n = first_rows(x1, n), c_n = first_rows(c, n),
                             out_n = first_rows(out, n);
    ln_1.forward(exec, x, a_n);
    attn.forward(exec, tp, a_n, out_n, /*add_proj_bias=*/false, step);
    // x1 = x + attention, c = ln_2(x1); without linear biases the projection has none to add
    if (attn.proj.has_bias) ln_2.forward_add_bias(exec, x, out_n, attn.proj.bias.value_vector(), x1_n, c_n);
    else ln_2.forward_add(exec, x, out_n, x1_n, c_n);
    if (moe) moe->forward(exec, tp, c_n, out_n);
    else mlp->forward(exec, tp, c_n, out_n, /*add_proj_bias=*/false);
    PhaseScope phase(Phase::norms_elementwise);
    if (mlp && mlp->proj.has_bias)
      kernels::bias_residual_add(exec, x1_n, out_n, mlp->proj.bias.value_vector(), y);  // y = x1 + mlp
    else kernels::add(exec, x1_n, out_n, y);
  }

  // dx = dL/dx from dy = dL/dy (dx overwritten).
  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy, const XV& x, const DXV& dx) {
    kernels::launch_count::SiteScope site(backward_site);
    if (moe) moe->backward(exec, tp, dy, c, g1);  // g1 = d c
    else mlp->backward(exec, tp, dy, c, g1);
    ln_2.backward_add(exec, g1, x1, dy, g2);  // g2 = d x1: through ln_2 plus the residual path
    attn.backward(exec, tp, g2, a, g1);    // g1 = d a
    ln_1.backward_add(exec, g1, x, g2, dx);
  }
};

}  // namespace tptrain::model
