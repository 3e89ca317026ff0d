// One block of the residual pattern pre-norm (src/model/spec/block_descriptor.hpp, kPreNorm):
// after_attention = x + attn(ln_1(x)); y = after_attention + mlp(ln_2(after_attention)), of the
// shape's block specification (src/model/spec/block_spec.hpp; docs/design.md, "The block
// specification"): in its norm, attention and MLP slots the kinds the specification names
// (docs/design.md, "Sublayer kinds"), made by the registry below (make_norm, make_position,
// make_attention, make_mlp) and driven through their slots' interfaces (sublayer.hpp).
// With sequence parallelism x, y, the LayerNorms and the residual adds work on this rank's
// [n, H] tokens (n = N/t) and the attention and MLP gather and reduce-scatter them
// (Korthikanti et al. 2022, Figure 5). Its parameters and buffers are the rows of the block
// descriptor (src/model/spec/block_descriptor.hpp).
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kokkos_kernels/bias.hpp"
#include "kokkos_kernels/launch_count.hpp"
#include "src/model/spec/block_descriptor.hpp"
#include "src/model/spec/model_parameters.hpp"
#include "src/model/gelu_mlp.hpp"
#include "src/model/layer_norm.hpp"
#include "src/model/learned_position.hpp"
#include "src/model/mixture_of_experts.hpp"
#include "src/model/multi_head_latent_attention.hpp"
#include "src/model/parallel_attention.hpp"
#include "src/model/relu2_mlp.hpp"
#include "src/model/rms_norm.hpp"
#include "src/model/rotary_position.hpp"
#include "src/model/spec/recompute.hpp"
#include "src/model/sublayer.hpp"
#include "src/model/swiglu_mlp.hpp"

namespace tptrain::model {

// The registry of the kinds' modules (sublayer_kinds.hpp holds their descriptions): the norm of
// shape s at the place named `name` ("layers/3/ln_1", "ln_f"; its parameters from `spec`:
// block_parameter or model_parameter) and the MLP of `kind`. A new kind is a line here.
template <class T, class SpecOf>
std::unique_ptr<NormSublayer<T>> make_norm(const GptShape& s, const SpecOf& spec, const std::string& name,
                                           const Communicator& tp, std::int64_t rows, Workspace<T>& ws,
                                           std::int64_t tokens, const SavedPlacement& placement) {
  const SublayerKind& kind = norm_kind(s);
  if (&kind == &kLayerNorm)
    return std::make_unique<LayerNorm<T>>(spec(name + "/weight"), spec(name + "/bias"), tp, rows, ws, s, tokens, placement);
  if (&kind == &kRmsNorm)
    return std::make_unique<RmsNorm<T>>(spec(name + "/weight"), s.norm_eps, tp, rows, ws, s, tokens, placement);
  throw std::logic_error(std::string("tptrain: the norm kind \"") + kind.name +
                         "\" has no module in the registry (src/model/transformer_layer.hpp, make_norm)");
}
// The positions of shape s where its kind acts (SublayerKind::in_attention): at the embedding
// (learned) or in every attention (rotary); null at the other place.
enum class PositionPlace { embedding, attention };
template <class T>
std::unique_ptr<PositionSublayer<T>> make_position(const GptShape& s, PositionPlace place, const Communicator& tp,
                                                   Workspace<T>& ws) {
  const SublayerKind& kind = position_kind(s);
  if (kind.in_attention != (place == PositionPlace::attention)) return nullptr;
  if (&kind == &kLearnedPosition)
    return std::make_unique<LearnedPosition<T>>(model_parameter(s, "embedding/position"), s, tp);
  if (kind.rotary.inverse != nullptr) return std::make_unique<RotaryPosition<T>>(s, ws);
  throw std::logic_error(std::string("tptrain: the position kind \"") + kind.name +
                         "\" has no module in the registry (src/model/transformer_layer.hpp, make_position)");
}
// The attention of shape s's kind at the block's place `name` ("layers/3/attn"), q and k rotated
// by the position kind where it acts there.
template <class T>
std::unique_ptr<AttentionSublayer<T>> make_attention(const GptShape& s, const std::string& name, int batch,
                                                     const Communicator& tp, Workspace<T>& ws, Recompute recompute,
                                                     const SavedPlacement& placement) {
  const SublayerKind& kind = attention_kind(s);
  if (&kind == &kGroupedQueryAttention)
    return std::make_unique<ParallelAttention<T>>(name, s, batch, tp, ws, recompute, placement,
                                                  make_position<T>(s, PositionPlace::attention, tp, ws));
  if (&kind == &kLatentAttention)
    return std::make_unique<MultiHeadLatentAttention<T>>(name, s, batch, tp, ws, recompute, placement,
                                                         make_position<T>(s, PositionPlace::attention, tp, ws));
  throw std::logic_error(std::string("tptrain: the attention kind \"") + kind.name +
                         "\" has no module in the registry (src/model/transformer_layer.hpp, make_attention)");
}
template <class T>
std::unique_ptr<MlpSublayer<T>> make_mlp(const SublayerKind& kind, const std::string& name, const GptShape& s,
                                         std::int64_t tokens, const Communicator& tp, Workspace<T>& ws, int ep_rank,
                                         const SavedPlacement& placement) {
  if (&kind == &kGeluMlp) return std::make_unique<GeluMlp<T>>(name, s, tokens, tp, ws, placement);
  if (&kind == &kSwigluMlp) return std::make_unique<SwigluMlp<T>>(name, s, tokens, tp, ws, placement);
  if (&kind == &kMoeMlp) return std::make_unique<MixtureOfExperts<T>>(name, s, tokens, tp, ws, ep_rank, placement);
  if (&kind == &kRelu2Mlp) return std::make_unique<Relu2Mlp<T>>(name, s, tokens, tp, ws, placement);
  throw std::logic_error(std::string("tptrain: the MLP kind \"") + kind.name +
                         "\" has no module in the registry (src/model/transformer_layer.hpp, make_mlp)");
}

template <class T>
struct TransformerLayer {
  // Everything forward keeps for backward (besides the block input x, which the caller keeps):
  // one set per micro-batch in flight, or with recompute = full one set shared by every block.
  struct Saved {
    std::shared_ptr<SublayerSaved> ln_1, ln_2, attn, mlp;  // each kind's own
    kernels::Matrix<T> attn_input, after_attention, mlp_input;  // [rows, H]: ln_1(x), x + attention, ln_2 of that
  };

  // Of the specification's kinds (model.norm, model.attention, model.mlp), in the block's order.
  std::unique_ptr<NormSublayer<T>> ln_1;
  std::unique_ptr<AttentionSublayer<T>> attn;
  std::unique_ptr<NormSublayer<T>> ln_2;
  std::unique_ptr<MlpSublayer<T>> mlp;
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
      : ln_1(make_norm<T>(pre_norm(s), block_spec(s), name + "/ln_1", tp, s.sequence_rows(tokens(s, batch)), ws,
                          tokens(s, batch), SavedPlacement{placement.prefix + "/ln_1", placement.category})),
        attn(make_attention<T>(s, name + "/attn", batch, tp, ws, recompute,
                               SavedPlacement{placement.prefix + "/attn", placement.category})),
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
    mlp = make_mlp<T>(mlp_kind(s), name + "/mlp", s, tokens_, tp, ws, ep_rank, mlp_placement);
    (void)parameters();  // a parameter without a descriptor row, or a row without its parameter, fails here
  }

  static std::int64_t tokens(const GptShape& s, int batch) { return std::int64_t(batch) * s.local_seq_length(); }
  // s, whose residual pattern (block_descriptor.hpp) is the one this block computes: pre-norm.
  static const GptShape& pre_norm(const GptShape& s) {
    if (&residual_pattern(s) != &kPreNorm)
      throw std::logic_error("tptrain: TransformerLayer computes the pre-norm block, not \"" + s.residual +
                             "\" (src/model/transformer_layer.hpp)");
    return s;
  }
  static auto block_spec(const GptShape& s) {
    return [&s](const std::string& name) { return block_parameter(s, name); };
  }

  // The set the constructor allocated (what the layer is bound to first).
  Saved current() const {
    return {ln_1->saved_set(), ln_2->saved_set(), attn->saved_set(), mlp->saved_set(), attn_input, after_attention, mlp_input};
  }
  // Another set, named `prefix` + buffer name, in category c.
  Saved make_saved(Workspace<T>& ws, const std::string& prefix, BufferCategory cat) const {
    return {ln_1->make_saved_set(ws, prefix + "/ln_1", cat),
            ln_2->make_saved_set(ws, prefix + "/ln_2", cat),
            attn->make_saved_set(ws, prefix + "/attn", cat),
            mlp->make_saved_set(ws, prefix + "/mlp", cat),
            ws.matrix(prefix + ".attn_input", cat, rows_, shape_.hidden),
            ws.matrix(prefix + ".after_attention", cat, rows_, shape_.hidden),
            ws.matrix(prefix + ".mlp_input", cat, rows_, shape_.hidden)};
  }
  void bind(const Saved& s) {
    ln_1->bind(s.ln_1);
    ln_2->bind(s.ln_2);
    attn->bind(s.attn);
    mlp->bind(s.mlp);
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
         {ln_1->parameters(), attn->parameters(), ln_2->parameters(), mlp->parameters()})
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
                             " (src/model/spec/block_descriptor.hpp)");
    return ordered;
  }

  // ---- what the model asks of every block, whatever kinds it holds ----------------------------

  // The micro-batch's documents (GptModel::bind_documents).
  void bind_documents(const kernels::Tokens& doc_start, const kernels::Tokens& positions) {
    attn->bind_documents(doc_start, positions);
  }
  // The groups a kind computes over besides the tensor group: the expert-parallel group (null:
  // parallel.expert = 1) and the context group (ring attention, sums over a sequence's chunks).
  void bind_expert_group(Communicator* ep) {
    if (ep != nullptr) mlp->bind_expert_group(*ep);
  }
  void bind_context_group(Communicator& cp) {
    attn->bind_context_group(cp);
    mlp->bind_context_group(cp);
  }
  // The scratch the stage's blocks share, and with recompute = full their one saved set: the
  // first block's.
  void share_stage_buffers(const TransformerLayer& first, bool saved_too) {
    mlp->share_stage_buffers(*first.mlp, saved_too);
  }
  // The gradient weight of this micro-batch's mean auxiliary losses.
  void set_auxiliary_loss_scale(kx::acc_t<T> micro_batch_weight) { mlp->set_auxiliary_loss_scale(micro_batch_weight); }
  // Whether forwards add to the statistics (not a recomputation, not an evaluation), and the
  // statistics since the last call, added to s (sublayer_statistics.hpp).
  void count_statistics(bool on) { mlp->count_statistics(on); }
  void take_statistics(StatisticSums& s) { mlp->take_statistics(s); }
  // Whether parameter p is summed over the expert-data group (a mixture's expert), not the data group.
  bool is_expert_parameter(const Parameter<T>* p) const { return mlp->is_expert_parameter(p); }

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
    ln_1->forward(exec, x, attn_input_n);
    attn->forward(exec, tp, attn_input_n, sublayer_out_n, /*add_output_bias=*/false, step);
    // after_attention = x + attention (+ its output bias, which it left out: none without linear
    // biases), mlp_input = ln_2(after_attention)
    const Parameter<T>* attn_bias = attn->output_bias();
    ln_2->forward_add(exec, x, sublayer_out_n, attn_bias ? attn_bias->value_vector() : kernels::VectorUnmanaged<T>(),
                      after_attention_n, mlp_input_n);
    mlp->forward(exec, tp, mlp_input_n, sublayer_out_n, /*add_output_bias=*/false);
    PhaseScope phase(Phase::norms_elementwise);
    if (const Parameter<T>* bias = mlp->output_bias())
      kernels::bias_residual_add(exec, after_attention_n, sublayer_out_n, bias->value_vector(), y);
    else kernels::add(exec, after_attention_n, sublayer_out_n, y);
  }

  // dx = dL/dx from dy = dL/dy (dx overwritten).
  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy, const XV& x, const DXV& dx) {
    kernels::launch_count::SiteScope site(backward_site);
    mlp->backward(exec, tp, dy, mlp_input, grad_sublayer_input);
    ln_2->backward_add(exec, grad_sublayer_input, after_attention, dy, grad_after_attention);  // through ln_2 plus the residual path
    attn->backward(exec, tp, grad_after_attention, attn_input, grad_sublayer_input);
    ln_1->backward_add(exec, grad_sublayer_input, x, grad_after_attention, dx);
  }
};

}  // namespace tptrain::model
