// What a block asks of the kind in its MLP slot, whatever the kind (docs/design.md, "Sublayer
// kinds"): Megatron-Core's TransformerLayerSubmodules, as a C++ interface. The block
// (transformer_layer.hpp) holds an MlpSublayer made by the registry from the specification's
// kind; nothing outside the kind's files knows which kind it is.
//
// Forward and backward run on the block's [rows, H] matrices (rows = N, or N/t with sequence
// parallelism; fewer in generation: the new tokens, in the leading rows of the kind's buffers).
// What forward keeps for backward is the kind's own, handed to the block as an opaque saved set,
// one per micro-batch in flight (SublayerSaved).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kokkos_kernels/views.hpp"
#include "src/model/parameter.hpp"
#include "src/model/spec/sublayer_statistics.hpp"
#include "src/model/workspace.hpp"
#include "src/model/linear.hpp"

namespace tptrain::model {

// A kind's saved set, opaque to the block; SavedSet<S> boxes the kind's own struct S.
struct SublayerSaved {
  virtual ~SublayerSaved() = default;
};
template <class S>
struct SavedSet : SublayerSaved {
  explicit SavedSet(S s) : set(std::move(s)) {}
  S set;
};
template <class S>
std::shared_ptr<SublayerSaved> box_saved(S s) {
  return std::make_shared<SavedSet<S>>(std::move(s));
}
template <class S>
const S& unbox_saved(const std::shared_ptr<SublayerSaved>& p) {
  return static_cast<const SavedSet<S>&>(*p).set;  // the block binds its own kinds' sets only
}

template <class T>
struct MlpSublayer {
  using Matrix = kernels::Matrix<T>;
  virtual ~MlpSublayer() = default;

  // Its parameters in the block descriptor's order (its kind's rows).
  virtual std::vector<Parameter<T>*> parameters() = 0;

  // y = MLP(x). add_output_bias = false leaves the output projection's bias (output_bias) to the
  // block, which fuses it into its residual add.
  virtual void forward(const Exec& exec, Communicator& tp, const Matrix& x, const Matrix& y, bool add_output_bias) = 0;
  // dx from dy (dx overwritten); x is the forward's input.
  virtual void backward(const Exec& exec, Communicator& tp, const Matrix& dy, const Matrix& x, const Matrix& dx) = 0;
  // The bias forward leaves to the block, or null.
  virtual const Parameter<T>* output_bias() const { return nullptr; }

  // The saved set it is bound to, another one named `prefix` + buffer name in category c, and
  // binding one (GptModel: one per micro-batch in flight, or one for the stage under recompute =
  // full).
  virtual std::shared_ptr<SublayerSaved> saved_set() const = 0;
  virtual std::shared_ptr<SublayerSaved> make_saved_set(Workspace<T>& ws, const std::string& prefix,
                                                        BufferCategory c) const = 0;
  virtual void bind(const std::shared_ptr<SublayerSaved>& s) = 0;

  // ---- what some kinds need of the model; a kind that needs none keeps these -----------------
  // The expert-parallel group (a mixture's all-to-all) and the context group (sums over the
  // sequence's chunks).
  virtual void bind_expert_group(Communicator&) {}
  virtual void bind_context_group(Communicator&) {}
  // The scratch the stage's blocks share, and with recompute = full their one saved set: the
  // first block's (the same kind).
  virtual void share_stage_buffers(const MlpSublayer&, bool /*saved_too*/) {}
  // The gradient weight of this micro-batch's mean auxiliary losses.
  virtual void set_auxiliary_loss_scale(kx::acc_t<T>) {}
  // Whether forwards add to the statistics (not a recomputation, not an evaluation), and the
  // statistics since the last call, added to s.
  virtual void count_statistics(bool) {}
  virtual void take_statistics(StatisticSums&) {}
  // Whether parameter p is summed over the expert-data group instead of the data group.
  virtual bool is_expert_parameter(const Parameter<T>*) const { return false; }
};

}  // namespace tptrain::model
