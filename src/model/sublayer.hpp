// What the model asks of the kinds in its slots, whatever the kind (docs/design.md, "Sublayer
// kinds"): Megatron-Core's TransformerLayerSubmodules, as C++ interfaces, one per slot — the norm
// (NormSublayer), the positions (PositionSublayer), the attention (AttentionSublayer) and the MLP
// (MlpSublayer). The block
// (transformer_layer.hpp) and the model (gpt_model.hpp) hold them, made by the registry
// (transformer_layer.hpp) from the specification's kinds; nothing outside a kind's files knows
// which kind it is.
//
// Forward and backward run on the block's [rows, H] matrices (rows = N, or N/t with sequence
// parallelism; fewer in generation: the new tokens, in the leading rows of the kind's buffers).
// What forward keeps for backward is the kind's own, handed to the block as an opaque saved set,
// one per micro-batch in flight (SublayerSaved).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kokkos_kernels/embedding.hpp"
#include "kokkos_kernels/rope.hpp"
#include "kokkos_kernels/views.hpp"
#include "src/model/parameter.hpp"
#include "src/model/spec/sublayer_statistics.hpp"
#include "src/model/workspace.hpp"
#include "src/model/kv_cache.hpp"
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

// A kind's place from its parameter's name: "layers/3/ln_1/weight" -> "layers/3/ln_1".
inline std::string place_name_of(const ParameterSpec& spec) {
  const std::size_t slash = spec.name.rfind('/');
  return slash == std::string::npos ? spec.name : spec.name.substr(0, slash);
}

// A norm at one place (the block's ln_1, ln_2; the head's ln_f): replicated on every tensor rank,
// each rank normalising its [rows, H] (with sequence parallelism its own tokens; its parameters'
// gradients are then per-rank parts the model sums over the group). Its statistics of the rows
// are its saved set.
template <class T>
struct NormSublayer {
  using Matrix = kernels::Matrix<T>;
  virtual ~NormSublayer() = default;
  virtual std::vector<Parameter<T>*> parameters() = 0;

  // y = norm(x) (y overwritten; it must not alias x).
  virtual void forward(const Exec& exec, const Matrix& x, const Matrix& y) = 0;
  // The residual add fused before it, one pass: x1 = x + r (+ r_bias: a residual branch's bias its
  // layer left out; empty for none), y = norm(x1). r is scratch: a kind may add r_bias into it.
  virtual void forward_add(const Exec& exec, const Matrix& x, const Matrix& r, const kernels::VectorUnmanaged<T>& r_bias,
                           const Matrix& x1, const Matrix& y) = 0;
  // dx from dy (dx overwritten); x is the forward's input.
  virtual void backward(const Exec& exec, const Matrix& dy, const Matrix& x, const Matrix& dx) = 0;
  // dx = the gradient through the norm plus `residual`, the residual path's gradient.
  virtual void backward_add(const Exec& exec, const Matrix& dy, const Matrix& x, const Matrix& residual,
                            const Matrix& dx) = 0;

  // Its saved set, another one named `prefix` + buffer name in category c, and binding one.
  virtual std::shared_ptr<SublayerSaved> saved_set() const = 0;
  virtual std::shared_ptr<SublayerSaved> make_saved_set(Workspace<T>& ws, const std::string& prefix,
                                                        BufferCategory c) const = 0;
  virtual void bind(const std::shared_ptr<SublayerSaved>& s) = 0;
};

// The positions: what a token's place adds to the model. A kind acts at one of two places, the
// embedding (a learned table added to the tokens) or every block's attention (q and k rotated), and
// the registry makes it only where it acts (transformer_layer.hpp, make_position).
template <class T>
struct PositionSublayer {
  using Matrix = kernels::Matrix<T>;
  virtual ~PositionSublayer() = default;
  virtual std::vector<Parameter<T>*> parameters() { return {}; }

  // At the embedding: y [rows, H] += the rows' positions' rows. first_position >= 0: the rows are
  // one sequence's tokens from that position on, or with `ids` at those positions; else the
  // micro-batch's, row r at position (first_row + r) mod S, or at ids.
  virtual void add_to_embedding(const Exec&, const Matrix& /*y*/, std::int64_t /*first_position*/,
                                std::int64_t /*first_row*/, const kernels::Tokens& /*ids*/) {}
  // Its parameters' gradient from dy [N, H] (every token's), `segments` the tokens grouped by
  // position id (null: each row's place).
  virtual void embedding_backward(const Exec&, const Matrix& /*dy*/, const kernels::TokenSegments* /*segments*/) {}

  // In the attention: the heads of qkv [rows, ·] (q and k; kernels::RotaryHeads: a count of whole
  // heads side by side, or a slice of each, multi-head latent attention's) rotated at the rows'
  // positions: `ids`, or from first_position on (>= 0; generation), or each row's place.
  virtual void rotate(const Exec&, const Matrix& /*qkv*/, const kernels::RotaryHeads& /*heads*/,
                      const kernels::Tokens& /*ids*/, std::int64_t /*first_position*/ = -1) {}
  // Its backward: the gradient rotated back.
  virtual void rotate_backward(const Exec&, const Matrix& /*d_qkv*/, const kernels::RotaryHeads& /*heads*/,
                               const kernels::Tokens& /*ids*/) {}
};

// The attention: y = attention(x) over the rows' sequences, causal, with the documents and
// positions the model binds, and with a cache step (generation) over the cached positions.
template <class T>
struct AttentionSublayer {
  using Matrix = kernels::Matrix<T>;
  virtual ~AttentionSublayer() = default;
  virtual std::vector<Parameter<T>*> parameters() = 0;

  // y = attention(x) [rows, H]. add_output_bias = false leaves the output projection's bias
  // (output_bias) to the block, which fuses it into its residual add. With a cache step x holds
  // generation's n new rows of one sequence, computed in the leading rows of the kind's buffers.
  virtual void forward(const Exec& exec, Communicator& tp, const Matrix& x, const Matrix& y,
                       bool add_output_bias = true, const CacheStep<T>* step = nullptr) = 0;
  // dx from dy (dx overwritten); x is the forward's input.
  virtual void backward(const Exec& exec, Communicator& tp, const Matrix& dy, const Matrix& x, const Matrix& dx) = 0;
  virtual const Parameter<T>* output_bias() const { return nullptr; }

  // The micro-batch's documents (GptModel::bind_documents; empty views: none): the first position
  // of each token's document [N] (the mask) and each token's position in its document [N].
  virtual void bind_documents(const kernels::Tokens& doc_start, const kernels::Tokens& positions) = 0;
  // The context group (ring attention over a sequence's chunks).
  virtual void bind_context_group(Communicator&) {}
  // Generation's cache of this layer for `positions` positions (kv_cache.hpp); stage_first: the
  // stage's first layer's, whose scratch a kind may share (null for the first).
  virtual KvCache<T> make_cache(const std::string& name, std::int64_t positions,
                                const KvCache<T>* stage_first) const = 0;

  virtual std::shared_ptr<SublayerSaved> saved_set() const = 0;
  virtual std::shared_ptr<SublayerSaved> make_saved_set(Workspace<T>& ws, const std::string& prefix,
                                                        BufferCategory c) const = 0;
  virtual void bind(const std::shared_ptr<SublayerSaved>& s) = 0;
};

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
  // Auxiliary-loss-free balancing (DeepSeek-V3; GptModel::balance_expert_biases): the router's
  // per-expert bias as the parameter the checkpoint holds (null: the kind has none), the copies
  // routed to each expert since the last take (counted as the statistics are), and the fp32 bias
  // the router chooses with.
  virtual Parameter<T>* expert_bias_parameter() { return nullptr; }
  // While keep_received_rows(true): the rows this rank's experts received in each counted
  // forward, in order, until taken (bench's routing imbalance, GptModel::take_expert_imbalance;
  // off in training, where the list would grow every step).
  virtual void keep_received_rows(bool) {}
  virtual std::vector<std::int64_t> take_received_rows() { return {}; }
  virtual std::vector<std::int64_t> take_expert_load() { return {}; }
  virtual std::vector<kx::acc_t<T>> expert_bias() const { return {}; }
  virtual void set_expert_bias(const std::vector<kx::acc_t<T>>&) {}
};

}  // namespace tptrain::model
