// A GPT-style model of any block specification with Megatron tensor parallelism (docs/design.md,
// "Model semantics", "The block specification"): token embedding (+ learned positions), `layers`
// pre-norm transformer blocks, a final norm, mean next-token cross-entropy; the logits through the
// tied word embedding, or untied (model.tie_embeddings = false) through the last
// stage's own lm_head/weight, which has no copy elsewhere. Forward and backward are written by hand;
// parameters hold gradients that accumulate over micro-batches until zero_grad().
//
// Pipeline parallelism: a GptModel object is ONE pipeline stage. Stage p of P holds the blocks
// [p*L/P, (p+1)*L/P) under their global names (layers/<global i>/...); the first stage also the
// embedding (word + position), the last stage ln_f, the output head and the loss. With v model
// chunks per stage (parallel.virtual_stages; interleaved 1F1B) stage p holds v chunks of L/(P·v)
// blocks, chunk c being virtual stage c·P + p: blocks [(c·P + p)·L/(P·v), +L/(P·v)); the
// embedding is in chunk 0 of stage 0, the head in chunk v − 1 of stage P − 1, and forward and
// backward run one chunk at a time (bind_slot names the chunk). The output
// head is tied to the word embedding, so the last stage holds a copy of embedding/word (same
// name, hence the same initial values by logical index): the training step sums the two
// copies' gradients over Topology::embedding() so that both stay identical; checkpoints write
// the first stage's copy only, and the gradient norm counts it once (unique_parameters()).
// With P = 1 the stage is both first and last and holds one word embedding, as a whole model.
// Multi-token prediction (model.mtp_depth > 0; src/model/multi_token_prediction.hpp) runs on the
// last stage after the head, from the stage output and the micro-batch's tokens, with the same
// word embedding (a copy there when P > 1, kept identical as the tied one) and output layer; its
// parameters are buckets of their own after the head's.
//
// Between stages the caller moves [N, H] tensors (N = micro_batch * seq_length):
//   forward:  a non-first stage reads its input from stage_input() (filled by the caller);
//             a non-last stage leaves its output in stage_output().
//   backward: a non-last stage reads dL/d(output) from output_grad() (filled by the caller);
//             a non-first stage leaves dL/d(input) in input_grad().
// With sequence parallelism these are the rank's [n, H] token shards (n = N/t).
//
// Activation slots: the activations kept for backward (src/model/spec/recompute.hpp) are kept per
// slot, one slot per micro-batch between its forward and its backward (a pipeline schedule
// reserves as many as it has in flight; evaluation and a one-stage step use slot 0).
// bind_slot(k) makes forward and backward use slot k. A slot holds the residual stream (each
// block's input and the stage output) and, unless recompute = full, every block's saved set;
// with full the blocks share one saved set and backward re-runs each block's forward from its
// kept input before the block's backward. The last stage's head (ln_f, logits, loss statistics)
// is kept once: a backward of a slot whose head was overwritten since recomputes it.
//
// Parameters live in flat buffers, one set per GradBucket (the parameters of one block, of the
// embedding, of the head), in the order backward finishes them: the gradients so that
// data-parallel reduction can send each bucket as one message as soon as it is final, values
// and AdamW moments so that the optimizer runs one kernel per bucket, not one per parameter.
// With sharded parameters (optimizer.shard = "parameters") a bucket's values exist whole only while
// its module computes: forward and backward gather each module's weights just before it and free
// them after (enter_module, leave_module; src/model/parameter_gathering.hpp).
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "src/model/spec/gpt_shape.hpp"
#include "src/model/spec/gradient_buckets.hpp"
#include "src/model/spec/model_parameters.hpp"
#include "src/model/multi_token_prediction.hpp"
#include "src/model/parameter_gathering.hpp"
#include "src/model/spec/recompute.hpp"
#include "src/model/transformer_layer.hpp"
#include "src/model/vocab_parallel_cross_entropy.hpp"
#include "src/model/vocab_parallel_embedding.hpp"
#include "src/util/memory_category.hpp"

namespace tptrain::model {

// Which pipeline stage a model object is (rank of the stage in its pipeline, number of stages,
// model chunks it holds: parallel.virtual_stages).
struct PipelineStage {
  int rank = 0;
  int size = 1;
  int chunks = 1;
  bool first() const { return rank == 0; }
  bool last() const { return rank == size - 1; }
  int virtual_stage(int chunk) const { return chunk * size + rank; }
};

// How the optimizer state is split over the data-parallel group: the distributed optimizer
// (ZeRO stage 1, Rajbhandari et al. 2020; Megatron's DistributedOptimizer) gives rank `rank` of
// `size` the fp32 master and AdamW moments of shard `rank` of every bucket. size 1: no split.
// With `gradients` (ZeRO stage 2, optimizer.shard = "gradients") the ranks keep only their shard of
// each bucket's gradient too (GradBucket::pooled); with `parameters` (ZeRO stage 3, "parameters")
// also of its compute weights (GradBucket::gathered, src/model/parameter_gathering.hpp), and
// `reshard_after_forward` says whether a module's gathered weights are freed after its forward.
struct OptimizerSharding {
  int rank = 0;
  int size = 1;
  bool gradients = false;
  bool parameters = false;
  bool reshard_after_forward = true;
  bool distributed() const { return size > 1; }
};

// Parameters stored back to back, at the same offsets, in flat buffers: fp32 gradients (reduced
// together), the compute values, and the fp32 master values and two AdamW moments (updated
// together). With T = float `master` is `values` (one buffer).
// With a distributed optimizer the flat buffers are padded with zeros to a multiple of the
// shard count d, shard r is [r·n/d, (r+1)·n/d), and master and moments exist for this rank's
// shard only: the parameters' own master (bf16/fp16) and moment views are then empty.
template <class T>
struct GradBucket {
  using Acc = kx::acc_t<T>;
  std::string name;                   // "head", "layers/<i>", "embedding"
  std::vector<Parameter<T>*> params;  // their value/master/grad/exp_avg/exp_avg_sq are subviews of these
  std::vector<std::int64_t> offsets;  // offsets[i]: where params[i] starts in grads and values
  kernels::Vector<Acc> grads;         // [sum of local sizes, padded] gradients, fp32
  kernels::Vector<T> values;          // [the same]
  std::int64_t shard_begin = 0, shard_end = 0;       // this rank's shard of grads/values
  kernels::Vector<Acc> master, exp_avg, exp_avg_sq;  // [shard_end - shard_begin]
  std::int64_t used = 0;                             // elements before the padding
  // A mixture of experts' experts of one block (model.mlp = moe): summed, and with a distributed
  // optimizer sharded, over the expert-data group instead of the data group (Topology::expert_dp).
  bool expert = false;
  int shards = 1;  // the optimizer's shards of this bucket (the sharding it was made with)
  bool sharded() const { return shards > 1; }
  // With sequence parallelism: the leading elements of grads, those of the parameters whose
  // gradients are summed over the TP group (placed first); 0 without it.
  std::int64_t sequence_parallel_elements = 0;
  std::int64_t padded = 0;  // the flat buffers' length: `used` rounded up to a multiple of `shards`
  // Sharded gradients (OptimizerSharding::gradients): the whole gradient exists only while a
  // micro-batch's backward writes it, in a slot of the model's gradient pool that `grads` and the
  // parameters' gradients are bound to (GptModel::bind_gradient_slot); each micro-batch's
  // reduce-scatter adds the rank's shard of it to `grad_shard`, the step's sum (ZeRO-2). Not for a
  // bucket whose gradient other parts of the backward write too (GptModel::keeps_whole_gradient).
  bool pooled = false;
  kernels::Vector<Acc> grad_shard;  // [shard_end - shard_begin], when pooled
  // Sharded parameters (OptimizerSharding::parameters): a pooled bucket keeps only its shard of the
  // compute weights, `value_shard`; `values` and its parameters' values are bound to its place in
  // the arena of gathered weights only while its module computes (ParameterGathering), empty else.
  bool gathered = false;
  kernels::Vector<T> value_shard;  // [shard_end - shard_begin], when gathered
  auto shard_values() const {
    return gathered ? Kokkos::subview(value_shard, std::make_pair(std::int64_t(0), shard_end - shard_begin))
                    : Kokkos::subview(values, std::make_pair(shard_begin, shard_end));
  }
  // The sum over the data-parallel group of this rank's shard, once the reductions are done.
  auto shard_grads() const {
    return pooled ? Kokkos::subview(grad_shard, std::make_pair(std::int64_t(0), shard_end - shard_begin))
                  : Kokkos::subview(grads, std::make_pair(shard_begin, shard_end));
  }
};

template <class T>
class GptModel {
 public:
  // Builds stage `stage` of the model (the whole model by default). Throws std::invalid_argument
  // if the shape does not divide over the TP group or the layers over the stages, and
  // std::length_error, before allocating anything, if a dimension does not fit in an int
  // (GptShape::validate).
  // `sharding`: the distributed optimizer's split of the buckets' optimizer state.
  // `context`: the context group (bind_context), needed when shape.context > 1.
  // `expert`: the expert-parallel group (Topology::ep), needed when shape.expert > 1, and
  // `expert_sharding` the distributed optimizer's split of the expert buckets (over the
  // expert-data group; size 1: none).
  GptModel(const GptShape& shape, int micro_batch, Communicator& tp, std::uint64_t seed,
           PipelineStage stage = {}, Recompute recompute = Recompute::selective, OptimizerSharding sharding = {},
           Communicator* context = nullptr, Communicator* expert = nullptr, OptimizerSharding expert_sharding = {})
      : shape_(validated(shape, micro_batch)), batch_(micro_batch), tp_(tp), stage_(stage), recompute_(recompute),
        sharding_(sharding), expert_sharding_(expert_sharding), rows_(shape.sequence_rows(tokens())),
        workspace_(std::size_t(phase_region_bytes(shape_, block_sizes(shape_, micro_batch), int(sizeof(T))))),
        residual_grad_(workspace_.matrix("residual_grad", BufferCategory::stage, rows_, shape.hidden)),
        residual_grad_next_(workspace_.matrix("residual_grad_next", BufferCategory::stage, rows_, shape.hidden)) {
    if (stage.size < 1 || stage.rank < 0 || stage.rank >= stage.size)
      throw std::invalid_argument("tptrain: pipeline stage " + std::to_string(stage.rank) + " of " +
                                  std::to_string(stage.size) + " does not exist");
    if (sharding.size < 1 || sharding.rank < 0 || sharding.rank >= sharding.size)
      throw std::invalid_argument("tptrain: optimizer shard " + std::to_string(sharding.rank) + " of " +
                                  std::to_string(sharding.size) + " does not exist");
    if ((sharding.parameters && !sharding.gradients) || (expert_sharding.parameters && !expert_sharding.gradients))
      throw std::invalid_argument("tptrain: sharded parameters shard the gradients too");
    if (stage.chunks < 1)
      throw std::invalid_argument("tptrain: " + std::to_string(stage.chunks) + " model chunks: expected >= 1");
    // The pipeline's rules and the interleaved schedule's chunks (base/layout_rules.hpp).
    for (const rules::Problem& p : rules::pipeline_problems(shape.layers, stage.size))
      throw std::invalid_argument("tptrain: " + p.text());
    for (const rules::Problem& p : rules::interleave_problems(shape.layers, stage.size, stage.chunks, 0))
      throw std::invalid_argument("tptrain: " + p.text());
    per_chunk_ = shape.layers / (stage.size * stage.chunks);
    if (shape.expert > 1 && (expert == nullptr || expert->size() != shape.expert))
      throw std::invalid_argument("tptrain: parallel.expert = " + std::to_string(shape.expert) +
                                  " needs its expert group of as many ranks");
    const int ep_rank = expert != nullptr ? expert->rank() : 0;
    const SequenceParallelBuffers<T> sp = sequence_parallel_buffers(workspace_, shape, tokens());
    if (stage.first()) {
      embedding_ = std::make_unique<VocabParallelEmbedding<T>>(
          shape, tp, make_position<T>(shape, PositionPlace::embedding, tp, workspace_));
      embedding_->sp = sp;
    }
    for (int c = 0; c < stage.chunks; ++c)
      for (int l = chunk_first_layer(c); l < chunk_first_layer(c) + per_chunk_; ++l)
        layers_.push_back(std::make_unique<TransformerLayer<T>>("layers/" + std::to_string(l),
                                                                block_shape(shape, l), micro_batch, tp, workspace_,
                                                                recompute, ep_rank));
    for (auto& layer : layers_) {
      layer->bind_expert_group(expert);
      // Each block shares the stage buffers of the stage's first block of its MLP's kind (DeepSeek's
      // dense first blocks and its mixtures: block_shape).
      const auto first = std::find_if(layers_.begin(), layers_.end(),
                                      [&](const auto& o) { return o->shape_.mlp == layer->shape_.mlp; });
      layer->share_stage_buffers(**first, recompute == Recompute::full);
      for (const Parameter<T>* p : layer->parameters()) expert_buckets_ = expert_buckets_ || layer->is_expert_parameter(p);
    }
    if (stage.last()) {
      ln_f_ = make_norm<T>(shape, [&](const std::string& n) { return model_parameter(shape, n); }, "ln_f", tp, rows_,
                           workspace_, tokens(), SavedPlacement{});
      if (!shape.tie_embeddings)
        lm_head_ = std::make_unique<Parameter<T>>(make_parameter<T>(
            with_split(model_parameter(shape, "lm_head/weight"), TensorSplit::column, "the output layer"), tp));
      head_ = std::make_unique<VocabParallelCrossEntropy<T>>(shape, tokens(), tp, workspace_);
      head_->sp = sp;
      final_norm_out_ = workspace_.matrix("ln_f.out", BufferCategory::activation, rows_, shape.hidden);
      // The tied output weight, or multi-token prediction's embedding: embedding/word exactly as
      // the first stage declares it.
      if (!stage.first() && (shape.tie_embeddings || shape.mtp_depth > 0))
        word_copy_ = std::make_unique<Parameter<T>>(VocabParallelEmbedding<T>(shape, tp).word);
      if (shape.mtp_depth > 0) {
        mtp_ = std::make_unique<MultiTokenPrediction<T>>(shape, micro_batch, tp, expert, ep_rank);
        for (TransformerLayer<T>* block : mtp_->blocks())
          for (const Parameter<T>* p : block->parameters()) expert_buckets_ = expert_buckets_ || block->is_expert_parameter(p);
      }
    }
    slots_.resize(static_cast<std::size_t>(stage.chunks));
    for (int c = 0; c < stage.chunks; ++c) slots_[static_cast<std::size_t>(c)].push_back(make_slot(c, 0));
    bind_slot(0);
    make_buckets(seed);
    if (context != nullptr) bind_context(*context);
    else if (shape.context > 1)
      throw std::invalid_argument("tptrain: parallel.context = " + std::to_string(shape.context) +
                                  " needs the context group");
  }

  // The shape once it passes every check a model makes before it allocates: its sizes and
  // layout (GptShape::validate) and what its kinds ask (validate_kinds). The constructor runs it
  // in the member initialisers, so that a refused shape allocates nothing.
  static const GptShape& validated(const GptShape& shape, int micro_batch) {
    shape.validate(micro_batch);
    validate_kinds(shape);
    return shape;
  }

  const GptShape& shape() const { return shape_; }
  // The documents of the micro-batch computed next (its forward and its backward; empty views:
  // none): data.document_mask's first position of each token's document [N], data.reset_positions'
  // position of each token in its document [N] and the tokens grouped by it (the learned position
  // gradient). Every block's attention and the embedding read them; the caller binds them again
  // before each micro-batch's forward and backward (train::PipelineRunner).
  void bind_documents(const kernels::Tokens& doc_start, const kernels::Tokens& positions,
                      const kernels::TokenSegments* position_segments) {
    for (TransformerLayer<T>* layer : blocks()) layer->bind_documents(doc_start, positions);
    if (embedding_) embedding_->documents = {positions, position_segments};
  }
  // Context parallelism (shape().context = C > 1): the context group the attention rings over
  // (Topology::cp(), C ranks), whose rank says which chunks of each sequence this rank computes.
  // Before the first forward; the micro-batches then hold those chunks' rows
  // (train::Documents::take_rows) with their global positions bound (bind_documents).
  void bind_context(Communicator& cp) {
    if (cp.size() != shape_.context)
      throw std::invalid_argument("tptrain: the context group has " + std::to_string(cp.size()) +
                                  " ranks, the model's parallel.context is " + std::to_string(shape_.context));
    context_group_ = &cp;
    for (auto& layer : layers_) layer->bind_context_group(cp);
  }
  ContextChunks context_chunks() const {
    return context_group_ ? ContextChunks{context_group_->rank(), context_group_->size(), shape_.seq_length}
                          : ContextChunks{0, 1, shape_.seq_length};
  }
  Communicator* context_group() const { return context_group_; }  // null before bind_context
  int micro_batch() const { return batch_; }
  // The rank's rows of a micro-batch: B·S, or B·S/C with context parallelism.
  std::int64_t tokens() const { return std::int64_t(batch_) * shape_.local_seq_length(); }
  Communicator& tp() const { return tp_; }
  const PipelineStage& stage() const { return stage_; }
  const OptimizerSharding& optimizer_sharding() const { return sharding_; }
  const OptimizerSharding& expert_optimizer_sharding() const { return expert_sharding_; }
  // Whether the stage's blocks hold experts (a mixture's), which have buckets of their own
  // (GradBucket::expert).
  bool has_expert_buckets() const { return expert_buckets_; }

  // Whether the blocks' forwards add to their kinds' statistics (not in an evaluation).
  void count_statistics(bool on) {
    for (TransformerLayer<T>* layer : blocks()) layer->count_statistics(on);
  }
  // The statistics of this stage's blocks since the last call (sublayer_statistics.hpp), summed;
  // with multi-token prediction its losses' sum and rows ("mtp.loss_sum", "mtp.rows"; zero on a
  // stage without the modules), after the blocks' on every stage.
  StatisticSums take_statistics() {
    StatisticSums s;
    for (TransformerLayer<T>* layer : blocks()) layer->take_statistics(s);
    if (shape_.mtp_depth > 0) {
      const std::pair<double, double> losses = mtp_ ? mtp_->take_losses(Exec()) : std::pair<double, double>{0, 0};
      s.at("mtp.loss_sum", 1)[0] += losses.first;
      s.at("mtp.rows", 1)[0] += losses.second;
    }
    return s;
  }
  bool is_first_stage() const { return stage_.first(); }
  bool is_last_stage() const { return stage_.last(); }
  // The first block of chunk 0 and of chunk c (global index), the blocks of a chunk, of the stage.
  int first_layer() const { return chunk_first_layer(0); }
  int chunk_first_layer(int c) const { return stage_.virtual_stage(c) * per_chunk_; }
  int chunk_layers() const { return per_chunk_; }
  int local_layers() const { return static_cast<int>(layers_.size()); }
  int chunks() const { return stage_.chunks; }
  // Whether chunk c holds the embedding (the first virtual stage) or the head (the last).
  bool chunk_has_embedding(int c) const { return embedding_ != nullptr && c == 0; }
  bool chunk_has_head(int c) const { return stage_.last() && c == stage_.chunks - 1; }
  // Whether chunk c's backward reads its input tokens grouped by id (kernels::TokenSegments): the
  // embedding's, and the head's with multi-token prediction (its modules' embeddings).
  bool chunk_groups_tokens(int c) const { return chunk_has_embedding(c) || (chunk_has_head(c) && mtp_); }
  // Whether the last stage holds a copy of embedding/word (pipeline > 1): the tied output layer's,
  // or multi-token prediction's embedding; its gradient is summed with the first stage's.
  bool shares_word_embedding() const {
    return stage_.size > 1 && (shape_.tie_embeddings || shape_.mtp_depth > 0) && (stage_.first() || stage_.last());
  }
  Recompute recompute() const { return recompute_; }
  // Rows of the stage tensors, the residual stream and LayerNorm: tokens(), or tokens()/t with
  // sequence parallelism.
  std::int64_t sequence_rows() const { return rows_; }

  // Activation slots (see the header comment), per chunk. reserve_slots(n) allocates up to n of
  // them for every chunk, reserve_slots(n, c) for chunk c. activation_slots(): all chunks'.
  int activation_slots(int chunk) const { return static_cast<int>(slots_.at(static_cast<std::size_t>(chunk)).size()); }
  int activation_slots() const {
    int n = 0;
    for (int c = 0; c < chunks(); ++c) n += activation_slots(c);
    return n;
  }
  void reserve_slots(int n, int chunk) {
    auto& slots = slots_.at(static_cast<std::size_t>(chunk));
    while (activation_slots(chunk) < n) slots.push_back(make_slot(chunk, activation_slots(chunk)));
  }
  void reserve_slots(int n) {
    for (int c = 0; c < chunks(); ++c) reserve_slots(n, c);
  }
  // Makes forward and backward run chunk `chunk` on its slot k.
  void bind_slot(int k, int chunk = 0) {
    const Slot& slot = slots_.at(static_cast<std::size_t>(chunk)).at(static_cast<std::size_t>(k));
    bound_slot_ = k;
    bound_chunk_ = chunk;
    if (recompute_ != Recompute::full)
      for (int l = 0; l < per_chunk_; ++l) layers_[local(chunk, l)]->bind(slot.layers[static_cast<std::size_t>(l)]);
  }
  int bound_chunk() const { return bound_chunk_; }

  // Buffers [rows, H] that received stage-output gradients wait in until their backward (an
  // interleaved schedule receives the next one while it sends the last; see PipelineRunner).
  void reserve_received_gradients(int n) {
    while (static_cast<int>(received_grads_.size()) < n)
      received_grads_.push_back(workspace_.matrix("received_grad#" + std::to_string(received_grads_.size()),
                                                  BufferCategory::stage, rows_, shape_.hidden));
  }
  int received_gradients() const { return static_cast<int>(received_grads_.size()); }
  kernels::Matrix<T> received_gradient(int j) const { return received_grads_.at(static_cast<std::size_t>(j)); }

  // Every parameter of this stage once, in checkpoint order; on a last stage that is not also
  // the first, the tied copy of embedding/word comes at the end.
  std::vector<Parameter<T>*> parameters() {
    std::vector<Parameter<T>*> ps = unique_parameters();
    if (word_copy_) ps.push_back(word_copy_.get());
    return ps;
  }
  // The parameters this stage owns logically: all but the tied copy of embedding/word (its
  // gradient norm and checkpoint belong to the first stage).
  std::vector<Parameter<T>*> unique_parameters() {
    std::vector<Parameter<T>*> ps;
    if (embedding_)
      for (Parameter<T>* p : embedding_->parameters()) ps.push_back(p);
    for (auto& layer : layers_)
      for (Parameter<T>* p : layer->parameters()) ps.push_back(p);
    if (ln_f_)
      for (Parameter<T>* p : ln_f_->parameters()) ps.push_back(p);
    if (lm_head_) ps.push_back(lm_head_.get());
    if (mtp_)
      for (Parameter<T>* p : mtp_->parameters()) ps.push_back(p);
    return ps;
  }
  // The last stage's copy of embedding/word (nullptr unless pipeline > 1 and this is the last stage).
  Parameter<T>* tied_copy() { return word_copy_.get(); }
  bool is_tied_copy(const Parameter<T>* p) const { return p != nullptr && p == word_copy_.get(); }
  // The word embedding this stage uses (first stage: its own; last stage: the tied copy; nullptr
  // on a last stage with untied embeddings).
  Parameter<T>* word() {
    if (embedding_) return &embedding_->word;
    return word_copy_.get();
  }
  // The output layer's weight [V_padded/tp, H] (last stage): the word embedding, or lm_head/weight.
  Parameter<T>* output_weight() { return lm_head_ ? lm_head_.get() : word(); }

  // In the order backward finishes them: head (last stage), blocks from last to first,
  // embedding (first stage).
  std::vector<GradBucket<T>>& buckets() { return buckets_; }
  const std::vector<GradBucket<T>>& buckets() const { return buckets_; }

  // Stage input [rows, H] of slot k (default: the bound slot) of the bound chunk: filled by the
  // caller before forward on a non-first stage.
  kernels::Matrix<T> stage_input(int k = -1) const { return residual(k).front(); }
  // Stage output [rows, H] of slot k of the bound chunk after its forward (the last block's output).
  kernels::Matrix<T> stage_output(int k = -1) const { return residual(k).back(); }
  // The same for chunk c.
  kernels::Matrix<T> chunk_input(int c, int k) const { return residual(k, c).front(); }
  kernels::Matrix<T> chunk_output(int c, int k) const { return residual(k, c).back(); }
  // dL/d(stage output) [rows, H]: filled by the caller before backward on a non-last stage.
  kernels::Matrix<T> output_grad() const { return residual_grad_next_; }
  // dL/d(stage input) [rows, H] after backward on a non-first stage.
  kernels::Matrix<T> input_grad() const { return residual_grad_next_; }

  // Runs the bound chunk on the bound slot: embedding (first virtual stage, from tokens [N]) or
  // stage_input(), then its blocks; on the last virtual stage also ln_f and the local logits
  // [N, V_padded/tp] (left in local_logits() until the next backward, which writes their
  // gradient over them).
  template <class TV>
  void forward_logits(const Exec& exec, const TV& tokens /*[N]*/) {
    forward_chunk(exec, tokens);
    if (chunk_has_head(bound_chunk_)) leave_module(head_module(), false);
  }
  const kernels::Matrix<T>& local_logits() const { return head_->logits; }
  // [N] the next-token loss of each token, -log p(target), of the last forward with targets, in
  // fp32 and the same on every TP rank (the last stage's; the vocab-parallel cross entropy's own
  // result, so no rank gathers the logits): multiple-choice scoring sums it over an ending's tokens.
  const kernels::Vector<kx::acc_t<T>>& token_losses() const { return head_->loss; }

  // The inference entry point (src/model/gpt_inference.hpp, generation with a KV cache) runs
  // this stage's layers on its own buffers: the first stage's embedding, block l of the stage
  // (global index first_layer() + l) and the last stage's ln_f (nullptr where the stage has none).
  VocabParallelEmbedding<T>* embedding() { return embedding_.get(); }
  // Whether this stage's embedding adds the tokens' positions (a position kind that acts there:
  // learned positions; their gradient groups the tokens by position id).
  bool embedding_adds_positions() const { return embedding_ && embedding_->position; }
  TransformerLayer<T>& layer(int l) { return *layers_.at(static_cast<std::size_t>(l)); }
  NormSublayer<T>* final_norm() { return ln_f_.get(); }

  // Sum over the micro-batch's tokens of the next-token loss (same on every TP rank; 0 on a
  // stage that is not the last); with count >= 0, over its first `count` tokens only.
  template <class TV>
  double forward(const Exec& exec, const TV& tokens, const TV& targets, std::int64_t count = -1) {
    forward_logits(exec, tokens);  // the loss reads the logits only
    return chunk_has_head(bound_chunk_) ? head_->loss_forward(exec, tp_, targets, count) : 0.0;
  }
  // The same for training: the loss of every token added on the device to `total` (a rank-0
  // View<double>; untouched on a stage that is not the last).
  // With multi-token prediction the head chunk also runs its modules (their losses kept apart:
  // take_statistics); `tokens` is kept for its backward.
  template <class TV, class SV>
  void forward(const Exec& exec, const TV& tokens, const TV& targets, const SV& total) {
    forward_chunk(exec, tokens);
    if (!chunk_has_head(bound_chunk_)) return;
    head_->loss_forward(exec, tp_, targets, total);
    if (mtp_) {  // in the head's module, with its weights
      if constexpr (std::is_convertible_v<TV, kernels::Tokens>) mtp_tokens_[bound_slot_] = tokens;
      else throw std::logic_error("tptrain: GptModel::forward: multi-token prediction takes the tokens as kernels::Tokens");
      mtp_->forward(exec, tp_, residual(bound_slot_).back(), tokens, targets, *word(), *output_weight(), true);
      mtp_slot_ = bound_slot_;
    }
    leave_module(head_module(), false);
  }

  // Blocks whose forward backward re-ran (recompute = full), heads recomputed, and block
  // backwards that recomputed Q Kᵀ (recompute = selective or full: no scores kept), since construction.
  std::int64_t recomputed_blocks() const { return recomputed_blocks_; }
  std::int64_t recomputed_heads() const { return recomputed_heads_; }
  std::int64_t recomputed_scores() const { return recomputed_scores_; }

  // Gradients of scale * (the sum returned by forward), accumulated into the parameters, for
  // the micro-batch of the bound slot and chunk. `segments`: its input tokens grouped by id
  // (train::MicroBatchQueue), which the first stage's word-embedding gradient reads
  // (other stages may pass nullptr). `bucket_done(b)` is called when bucket b has this
  // micro-batch's contribution (for reduction hooks), `bucket_begin(b)` before the backward writes
  // the first of it (sharded gradients bind the bucket to a pool slot there).
  template <class TV>
  void backward(const Exec& exec, const kernels::TokenSegments* segments, const TV& targets, kx::acc_t<T> scale,
                const std::function<void(std::size_t)>& bucket_done = {},
                const std::function<void(std::size_t)>& bucket_begin = {}) {
    const int c = bound_chunk_;
    if (chunk_groups_tokens(c) && segments == nullptr)
      throw std::invalid_argument("tptrain: GptModel::backward: the first stage (and a last one with multi-token "
                                  "prediction) needs its input tokens grouped by id (kernels::TokenSegments, as "
                                  "train::MicroBatchQueue builds them)");
    // The buckets are in backward order: the head, then the chunks from the last down, each
    // from its last block down, then the embedding.
    const std::size_t per_block = expert_buckets_ ? 2 : 1;  // a block's dense bucket, then its experts'
    std::size_t b = chunk_has_head(c) ? 0
                                      : (stage_.last() ? head_buckets() : 0u) + std::size_t(chunks() - 1 - c) * per_chunk_ * per_block;
    const auto done = [&] {
      if (bucket_done) bucket_done(b);
      ++b;
    };
    const auto begin = [&](std::size_t buckets) {  // the next `buckets`, written together
      for (std::size_t k = 0; bucket_begin && k < buckets; ++k) bucket_begin(b + k);
    };
    const std::vector<kernels::Matrix<T>>& x = residual(bound_slot_);
    // Sharded parameters: each module's weights gathered before its backward, the next one's
    // prefetched; the embedding's backward reads no weights.
    const auto next_block = [&](int l) { return l > 0 ? block_module(c, l - 1) : -1; };
    if (chunk_has_head(c)) {
      enter_module(exec, head_module(), next_block(per_chunk_));
      if (head_slot_ != bound_slot_) {  // another micro-batch's forward overwrote the head since
        head_forward(exec);
        head_->loss_per_token(exec, tp_, targets);
        ++recomputed_heads_;
      }
      begin(head_buckets());
      head_->backward(exec, tp_, targets, final_norm_out_, *output_weight(), scale, residual_grad_);
      head_slot_ = -1;  // the logits now hold their gradient (written in place)
      ln_f_->backward(exec, residual_grad_, x.back(), residual_grad_next_);
      if (mtp_) mtp_backward(exec, *segments, targets, scale);
      leave_module(head_module(), true);
      for (std::size_t k = 0; k < head_buckets(); ++k) done();
    }  // else residual_grad_next_ holds dL/d(stage output), filled by the caller
    for (std::size_t l = static_cast<std::size_t>(per_chunk_); l-- > 0;) {
      TransformerLayer<T>& layer = *layers_[local(c, static_cast<int>(l))];
      // The mixture's losses weigh as the micro-batch's mean token loss does: scale per token, over
      // the whole micro-batch (its losses are the context group's, and their gradients are summed
      // over it as the token losses' are).
      layer.set_auxiliary_loss_scale(scale * kx::acc_t<T>(tokens() * shape_.context));
      enter_module(exec, block_module(c, int(l)), next_block(int(l)));
      if (recompute_ == Recompute::full) {
        // The block's forward again from its kept input, into the shared saved set; its
        // output (already in x[l + 1]) goes to residual_grad_, which the backward then overwrites.
        layer.count_statistics(false);  // its routing was counted by the first forward
        layer.forward(exec, tp_, x[l], residual_grad_);
        layer.count_statistics(true);
        ++recomputed_blocks_;
      }
      begin(per_block);
      layer.backward(exec, tp_, residual_grad_next_, x[l], residual_grad_);
      // ParallelAttention::backward's Q Kᵀ: the batched core's unless it kept the scores, flash's
      // block scores always (it keeps none)
      if (recompute_ != Recompute::none || shape_.flash_attention) ++recomputed_scores_;
      std::swap(residual_grad_, residual_grad_next_);
      leave_module(block_module(c, int(l)), true);
      for (std::size_t k = 0; k < per_block; ++k) done();
    }
    if (chunk_has_embedding(c)) {
      begin(1);
      embedding_->backward(exec, tp_, *segments, residual_grad_next_);
      done();
    }  // else residual_grad_next_ holds dL/d(stage input)
  }

  // Rounds every compute copy from its fp32 master (after loading weights); nothing to do when
  // the model computes in fp32. With a distributed optimizer only the shard: the caller then
  // all-gathers the values over the data-parallel group.
  void round_compute_copy(const Exec& exec) {
    if constexpr (Parameter<T>::has_master_copy)
      for (auto& bucket : buckets_) kernels::convert(exec, bucket.master, bucket.shard_values());
  }

  // Auxiliary-loss-free balancing (DeepSeek-V3 §2.1.2; model.mlp = "moe" with
  // training.moe_bias_update_rate = rate), after an optimizer step: each block's expert bias
  // b_e += rate · sign(mean load − load_e) in fp32, the loads the step's copies per expert summed
  // over `dp` (data × context: each rank routes its own tokens, the tensor ranks the same ones),
  // so that every rank computes the same bias. The bias's parameter follows: its value on every
  // rank, and its fp32 master where this rank holds the master's shard.
  void balance_expert_biases(const Exec& exec, double rate, const Communicator& dp) {
    std::vector<MlpSublayer<T>*> routers;
    std::vector<double> load;
    for (TransformerLayer<T>* layer : blocks())
      if (layer->mlp->expert_bias_parameter() != nullptr) {
        routers.push_back(layer->mlp.get());
        for (const std::int64_t n : layer->mlp->take_expert_load()) load.push_back(double(n));
      }
    if (routers.empty()) return;
    parallel::all_reduce_host(dp, load, parallel::ReduceOp::sum);
    using Acc = kx::acc_t<T>;
    std::size_t at = 0;
    for (MlpSublayer<T>* router : routers) {
      std::vector<Acc> b = router->expert_bias();
      double mean = 0;
      for (std::size_t e = 0; e < b.size(); ++e) mean += load[at + e] / double(b.size());
      for (std::size_t e = 0; e < b.size(); ++e) {
        const double gap = mean - load[at + e];
        b[e] += Acc(rate) * Acc(gap > 0 ? 1 : gap < 0 ? -1 : 0);
      }
      at += b.size();
      router->set_expert_bias(b);
      write_parameter(exec, *router->expert_bias_parameter(), b);
    }
  }
  // The routers' fp32 expert biases, block after block (empty: none).
  std::vector<double> expert_biases() {
    std::vector<double> out;
    for (TransformerLayer<T>* layer : blocks())
      for (const auto b : layer->mlp->expert_bias()) out.push_back(double(b));
    return out;
  }
  // The routing's imbalance over the expert-parallel group `ep` (`tptrain bench`, for
  // `plan --expert-imbalance`): from keep_expert_rows(true) until this call, Σ over the blocks'
  // counted forwards of the busiest rank's received rows ÷ Σ of the group's mean (1: balanced;
  // each all-to-all waits for the busiest rank's experts). 1 without experts.
  void keep_expert_rows(bool on) {
    for (TransformerLayer<T>* layer : blocks()) layer->mlp->keep_received_rows(on);
  }
  double take_expert_imbalance(const Communicator& ep) {
    std::vector<double> rows;
    for (TransformerLayer<T>* layer : blocks())
      for (const std::int64_t n : layer->mlp->take_received_rows()) rows.push_back(double(n));
    std::vector<double> most = rows;
    parallel::all_reduce_host(ep, most, parallel::ReduceOp::max);
    parallel::all_reduce_host(ep, rows, parallel::ReduceOp::sum);
    double busiest = 0, mean = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      busiest += most[i];
      mean += rows[i] / ep.size();
    }
    return mean > 0 ? busiest / mean : 1.0;
  }
  // Discards the loads counted since the last balancing (a step's start: a skipped step's count
  // none).
  void discard_expert_loads() {
    for (TransformerLayer<T>* layer : blocks()) layer->mlp->take_expert_load();
  }
  // Each block's fp32 expert bias from its parameter's master (after a checkpoint set the
  // masters): where the optimizer shards the bucket, each element from the rank that holds it,
  // summed over the shard group `dp` (the others add 0).
  void expert_biases_from_master(const Exec& exec, const Communicator& dp) {
    using Acc = kx::acc_t<T>;
    for (TransformerLayer<T>* layer : blocks()) {
      Parameter<T>* p = layer->mlp->expert_bias_parameter();
      if (p == nullptr) continue;
      const auto [bucket, offset] = bucket_of(*p);
      std::vector<Acc> b(static_cast<std::size_t>(p->local_size()), Acc(0));
      const std::int64_t begin = std::max(offset, bucket->shard_begin);
      const std::int64_t end = std::min(offset + p->local_size(), bucket->shard_end);
      if (begin < end) {
        auto master = Kokkos::create_mirror_view_and_copy(
            Kokkos::HostSpace(),
            Kokkos::subview(bucket->master, std::make_pair(begin - bucket->shard_begin, end - bucket->shard_begin)));
        exec.fence();
        for (std::int64_t i = begin; i < end; ++i) b[std::size_t(i - offset)] = master(i - begin);
      }
      if (bucket->sharded()) parallel::all_reduce_host(dp, b, parallel::ReduceOp::sum);
      layer->mlp->set_expert_bias(b);
    }
  }

  void zero_grad(const Exec& exec) {
    for (auto& bucket : buckets_) kernels::fill(exec, bucket.pooled ? bucket.grad_shard : bucket.grads, kx::acc_t<T>(0));
  }

  // Sharded parameters (OptimizerSharding::parameters): the groups the gathered buckets' shards
  // are spread over (data x context; the experts': the expert-data group), before the first forward.
  void bind_shard_groups(Communicator& dp, Communicator* expert_dp) { gathering_.bind_groups(dp, expert_dp); }
  // Frees every module's gathered weights (after their shards changed: an optimizer step, a load).
  void release_gathered_weights(const Exec& exec) { gathering_.release_all(exec, buckets_); }
  std::size_t gathered_weight_bytes() const { return gathering_.bytes(); }
  const typename ParameterGathering<T>::Stats& gather_stats() const { return gathering_.stats(); }

  // Sharded gradients (OptimizerSharding::gradients): the pool of whole-bucket gradient buffers
  // the pooled buckets' backwards write into, one slot per bucket a backward holds at once plus
  // one whose reduce-scatter is in flight (train::GradientReducer hands them out), each as long
  // as the longest pooled bucket. Empty without pooled buckets.
  int gradient_slots() const { return static_cast<int>(gradient_pool_.size()); }
  std::size_t gradient_pool_bytes() const {
    std::size_t n = 0;
    for (const auto& slot : gradient_pool_) n += slot.span() * sizeof(kx::acc_t<T>);
    return n;
  }
  const kernels::Vector<kx::acc_t<T>>& gradient_slot(int k) const { return gradient_pool_.at(std::size_t(k)); }
  // Bucket b's gradients, and its parameters', in pool slot k, zeroed (before its backward).
  void bind_gradient_slot(const Exec& exec, std::size_t b, int k) {
    GradBucket<T>& bucket = buckets_.at(b);
    if (!bucket.pooled) throw std::logic_error("tptrain: bucket " + bucket.name + " keeps a gradient of its own");
    bucket.grads = Kokkos::subview(gradient_pool_.at(static_cast<std::size_t>(k)),
                                   std::make_pair(std::int64_t(0), bucket.padded));
    kernels::fill(exec, bucket.grads, kx::acc_t<T>(0));
    for (std::size_t i = 0; i < bucket.params.size(); ++i)
      bucket.params[i]->grad = Kokkos::subview(
          bucket.grads, std::make_pair(bucket.offsets[i], bucket.offsets[i] + bucket.params[i]->local_size()));
  }

  // Sequence parallelism: sums over the TP group the gradients of bucket b's parameters that
  // each rank computed from its own tokens (LayerNorm, row-parallel biases); call once per
  // step, after the last micro-batch's backward has finished the bucket and before the
  // gradients are read (data-parallel reduction, norm). One all-reduce per bucket: those
  // parameters lead the bucket (make_buckets). Nothing to do without it.
  void sum_sequence_parallel_gradients(const Exec& exec, std::size_t b) {
    const GradBucket<T>& bucket = buckets_.at(b);
    if (!shape_.splits_sequence() || bucket.sequence_parallel_elements == 0) return;
    parallel::sum_sequence_parallel_gradient(
        tp_, exec, Kokkos::subview(bucket.grads, std::make_pair(std::int64_t(0), bucket.sequence_parallel_elements)));
  }

  // Bytes of the activation and scratch buffers of one micro-batch (what one forward/backward
  // needs besides the parameters), from the stage's workspace.
  std::size_t activation_bytes() const { return workspace_.total_bytes(); }
  const Workspace<T>& workspace() const { return workspace_; }

 private:
  // The modules, by their step of the backward (make_buckets, gradient_buckets.hpp): the head's
  // first on the last stage, then block l of chunk c from the last chunk's last block down, then
  // the embedding.
  int head_module() const { return 0; }
  int block_module(int c, int l) const {
    return (stage_.last() ? 1 : 0) + (chunks() - 1 - c) * per_chunk_ + (per_chunk_ - 1 - l);
  }
  int embedding_module() const { return (stage_.last() ? 1 : 0) + chunks() * per_chunk_; }
  // Sharded parameters: module s's weights gathered before it computes, the gather of `next`
  // (-1: none) started behind it; freed after its backward, and after its forward with
  // reshard_after_forward.
  void enter_module(const Exec& exec, int s, int next) {
    if (!gathering_.active()) return;
    gathering_.wait(exec, buckets_, module_buckets_.at(std::size_t(s)));
    if (next >= 0) gathering_.start(exec, buckets_, module_buckets_.at(std::size_t(next)));
  }
  void leave_module(int s, bool after_backward) {
    if (gathering_.active() && (after_backward || sharding_.reshard_after_forward))
      gathering_.release(buckets_, module_buckets_.at(std::size_t(s)));
  }
  // The bound chunk's forward on the bound slot: embedding (first virtual stage) or stage_input(),
  // its blocks, and ln_f and the logits (last virtual stage), whose module the caller leaves.
  template <class TV>
  void forward_chunk(const Exec& exec, const TV& tokens) {
    const int c = bound_chunk_;
    const std::vector<kernels::Matrix<T>>& x = residual(bound_slot_);
    const auto after_block = [&](int l) {
      return l + 1 < per_chunk_ ? block_module(c, l + 1) : chunk_has_head(c) ? head_module() : -1;
    };
    if (chunk_has_embedding(c)) {
      enter_module(exec, embedding_module(), after_block(-1));
      embedding_->forward(exec, tp_, tokens, x[0]);
      leave_module(embedding_module(), false);
    }
    for (int l = 0; l < per_chunk_; ++l) {
      enter_module(exec, block_module(c, l), after_block(l));
      layers_[local(c, l)]->forward(exec, tp_, x[static_cast<std::size_t>(l)], x[static_cast<std::size_t>(l) + 1]);
      leave_module(block_module(c, l), false);
    }
    if (!chunk_has_head(c)) return;
    enter_module(exec, head_module(), -1);
    head_forward(exec);
  }

  // The stage's blocks and its multi-token prediction modules' (balancing, statistics, documents).
  std::vector<TransformerLayer<T>*> blocks() {
    std::vector<TransformerLayer<T>*> out;
    for (auto& layer : layers_) out.push_back(layer.get());
    if (mtp_)
      for (TransformerLayer<T>* b : mtp_->blocks()) out.push_back(b);
    return out;
  }
  // The buckets the head chunk's backward finishes: the head's, and multi-token prediction's
  // (its dense parameters, and its block's experts).
  std::size_t head_buckets() const { return !stage_.last() ? 0 : !mtp_ ? 1 : expert_buckets_ ? 3 : 2; }
  // Multi-token prediction's backward (after the head's): its forward again when another
  // micro-batch's ran since, its gradients, d(stage output) added to residual_grad_next_. Its
  // losses weigh λ/D per row, over the main loss's denominator (`scale`).
  template <class TV>
  void mtp_backward(const Exec& exec, const kernels::TokenSegments& segments, const TV& targets, kx::acc_t<T> scale) {
    const kernels::Matrix<T>& h0 = residual(bound_slot_).back();
    if (mtp_slot_ != bound_slot_)
      mtp_->forward(exec, tp_, h0, mtp_tokens_.at(bound_slot_), targets, *word(), *output_weight(), false);
    mtp_slot_ = -1;
    const kx::acc_t<T> weight = scale * kx::acc_t<T>(shape_.mtp_loss_coeff / shape_.mtp_depth);
    mtp_->backward(exec, tp_, h0, segments, *word(), *output_weight(), weight, residual_grad_next_);
  }
  bool is_mtp_expert(const Parameter<T>* p) {
    for (TransformerLayer<T>* b : mtp_->blocks())
      if (b->is_expert_parameter(p)) return true;
    return false;
  }
  // The bucket that holds parameter p, and p's offset in its flat buffers.
  std::pair<const GradBucket<T>*, std::int64_t> bucket_of(const Parameter<T>& p) const {
    for (const auto& bucket : buckets_)
      for (std::size_t i = 0; i < bucket.params.size(); ++i)
        if (bucket.params[i] == &p) return {&bucket, bucket.offsets[i]};
    throw std::logic_error("tptrain: parameter " + p.name + " is in no bucket");
  }
  // Sets parameter p (a whole local tensor) to b: its compute value on this rank (of a gathered
  // bucket: the elements in this rank's shard), and its fp32 master's elements in this rank's
  // shard (the master is the value in an fp32 run).
  void write_parameter(const Exec& exec, Parameter<T>& p, const std::vector<kx::acc_t<T>>& b) {
    using Acc = kx::acc_t<T>;
    const auto [bucket, offset] = bucket_of(p);
    kernels::Vector<Acc> staged("tptrain::GptModel::write_parameter", b.size());
    Kokkos::deep_copy(exec, staged,
                      Kokkos::View<const Acc*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(b.data(),
                                                                                                          b.size()));
    const std::int64_t begin = std::max(offset, bucket->shard_begin);
    const std::int64_t end = std::min(offset + p.local_size(), bucket->shard_end);
    if (!bucket->gathered) kernels::convert(exec, staged, p.value);
    else if (begin < end)  // the shard's part; gathered copies are stale now
      kernels::convert(exec, Kokkos::subview(staged, std::make_pair(begin - offset, end - offset)),
                       Kokkos::subview(bucket->value_shard, std::make_pair(begin - bucket->shard_begin, end - bucket->shard_begin)));
    if (bucket->gathered) gathering_.release_all(exec, buckets_);
    if constexpr (Parameter<T>::has_master_copy) {
      if (begin < end)
        Kokkos::deep_copy(
            exec,
            Kokkos::subview(bucket->master, std::make_pair(begin - bucket->shard_begin, end - bucket->shard_begin)),
            Kokkos::subview(staged, std::make_pair(begin - offset, end - offset)));
    }
    exec.fence();  // `staged` and `b` are freed on return
  }

  // The residual stream of slot k (bound slot for k < 0) of chunk c (the bound chunk for c < 0):
  // the chunk's layers + 1 of [rows, H].
  const std::vector<kernels::Matrix<T>>& residual(int k, int c = -1) const {
    return slots_.at(static_cast<std::size_t>(c < 0 ? bound_chunk_ : c)).at(static_cast<std::size_t>(k < 0 ? bound_slot_ : k)).residual;
  }
  // layers_ index of block l of chunk c.
  std::size_t local(int c, int l) const { return static_cast<std::size_t>(c * per_chunk_ + l); }

  // Slot 0 takes the buffers the layers allocated; later slots get their own (recompute = full:
  // only the residual stream, the blocks share their saved set).
  struct Slot {
    std::vector<kernels::Matrix<T>> residual;
    std::vector<typename TransformerLayer<T>::Saved> layers;
  };
  Slot make_slot(int c, int k) {
    Slot slot;
    const std::string suffix = k == 0 ? "" : "#" + std::to_string(k);
    const int first = chunk_first_layer(c);
    for (int l = 0; l <= per_chunk_; ++l)
      slot.residual.push_back(workspace_.matrix("residual." + std::to_string(first + l) + suffix,
                                                BufferCategory::activation, rows_, shape_.hidden));
    if (recompute_ != Recompute::full)
      for (int l = 0; l < per_chunk_; ++l) {
        TransformerLayer<T>& layer = *layers_[local(c, l)];
        slot.layers.push_back(k == 0 ? layer.current()
                                     : layer.make_saved(workspace_, "layers/" + std::to_string(first + l) + suffix,
                                                        BufferCategory::activation));
      }
    return slot;
  }

  // ln_f and the local logits from the bound slot's stage output.
  void head_forward(const Exec& exec) {
    ln_f_->forward(exec, residual(bound_slot_).back(), final_norm_out_);
    head_->logits_forward(exec, tp_, final_norm_out_, *output_weight());
    head_slot_ = bound_slot_;
  }

  // The flat buffers of each bucket (zeroed); each parameter's views become slices of them, and
  // the parameters get their initial values.
  void make_buckets(std::uint64_t seed) {
    using Acc = kx::acc_t<T>;
    std::vector<BucketExtent> extents;
    int step = 0;  // of the backward: the buckets it writes together (gradient_pool)
    const auto add = [&](std::string name, std::vector<Parameter<T>*> params, bool expert = false) {
      const OptimizerSharding& sharding = expert ? expert_sharding_ : sharding_;
      const bool split = sharding.distributed();
      GradBucket<T> b;
      b.name = std::move(name);
      b.params = std::move(params);
      b.expert = expert;
      b.shards = sharding.size;
      // Sequence parallelism: the gradients summed over the TP group (LayerNorm, row-parallel
      // biases) come first, so that one all-reduce of the bucket's leading elements sums them all
      // (sum_sequence_parallel_gradients), not one all-reduce per parameter.
      if (shape_.splits_sequence())
        std::stable_partition(b.params.begin(), b.params.end(),
                              [](const Parameter<T>* p) { return p->sequence_parallel_gradient; });
      for (const Parameter<T>* p : b.params) {
        b.used += p->local_size();
        if (shape_.splits_sequence() && p->sequence_parallel_gradient) b.sequence_parallel_elements += p->local_size();
      }
      const BucketExtent extent{b.used, sharding.size, expert, keeps_whole_gradient(b.params), step};
      extents.push_back(extent);
      b.shard_begin = split ? sharding.rank * extent.owned() : 0;
      b.shard_end = split ? b.shard_begin + extent.owned() : b.used;
      const std::int64_t total = extent.padded();
      const std::int64_t owned = b.shard_end - b.shard_begin;
      b.padded = total;
      b.pooled = extent.pooled(sharding.gradients);
      b.gathered = extent.gathered(sharding.parameters);
      util::MemoryCategoryScope as(util::MemoryCategory::gradients);
      if (b.pooled) b.grad_shard = kernels::Vector<Acc>(b.name + ".grad_shard", owned);
      else b.grads = kernels::Vector<Acc>(b.name + ".grads", total);
      as.change(util::MemoryCategory::weights);
      // Gathered: the whole weights only while they are drawn, then the shard is kept.
      if (b.gathered) b.value_shard = kernels::Vector<T>(b.name + ".value_shard", owned);
      b.values = kernels::Vector<T>(b.name + (b.gathered ? ".values.init" : ".values"), total);
      as.change(util::MemoryCategory::optimizer_state);  // the fp32 master too, as Megatron counts it
      if constexpr (Parameter<T>::has_master_copy) b.master = kernels::Vector<Acc>(b.name + ".master", owned);
      else b.master = b.shard_values();
      b.exp_avg = kernels::Vector<Acc>(b.name + ".exp_avg", owned);
      b.exp_avg_sq = kernels::Vector<Acc>(b.name + ".exp_avg_sq", owned);
      // The initial values are drawn as fp32 masters of whole parameters: with a split bf16/fp16
      // master, into a temporary whole one whose shard is kept.
      kernels::Vector<Acc> whole_master = b.master;
      if constexpr (Parameter<T>::has_master_copy)
        if (split) whole_master = kernels::Vector<Acc>(b.name + ".master.init", total);
      std::int64_t offset = 0;
      for (Parameter<T>* p : b.params) {
        const auto slice = std::make_pair(offset, offset + p->local_size());
        b.offsets.push_back(offset);
        if (!b.pooled) p->grad = Kokkos::subview(b.grads, slice);
        p->value = Kokkos::subview(b.values, slice);
        if constexpr (Parameter<T>::has_master_copy) p->master = Kokkos::subview(whole_master, slice);
        else p->master = p->value;
        if (!split) {
          p->exp_avg = Kokkos::subview(b.exp_avg, slice);
          p->exp_avg_sq = Kokkos::subview(b.exp_avg_sq, slice);
        }
        initialise(*p, seed);
        offset += p->local_size();
      }
      if constexpr (Parameter<T>::has_master_copy)
        if (split) {
          Kokkos::deep_copy(b.master, Kokkos::subview(whole_master, std::make_pair(b.shard_begin, b.shard_end)));
          for (Parameter<T>* p : b.params) p->master = {};
        }
      if (b.gathered) {
        Kokkos::deep_copy(b.value_shard, Kokkos::subview(b.values, std::make_pair(b.shard_begin, b.shard_end)));
        b.values = {};
        for (Parameter<T>* p : b.params) {
          p->value = {};
          p->master = {};
        }
      }
      buckets_.push_back(std::move(b));
    };
    if (stage_.last()) {
      std::vector<Parameter<T>*> head = ln_f_->parameters();
      if (lm_head_) head.push_back(lm_head_.get());
      if (word_copy_) head.push_back(word_copy_.get());
      add("head", head);
      if (mtp_) {  // after the head's in backward order: the modules' backward runs with it
        std::vector<Parameter<T>*> dense, experts;
        for (Parameter<T>* p : mtp_->parameters())
          (is_mtp_expert(p) ? experts : dense).push_back(p);
        add("mtp", dense);
        if (expert_buckets_) add("mtp/experts", experts, true);
      }
      ++step;
    }
    for (int c = chunks(); c-- > 0;)
      for (int l = per_chunk_; l-- > 0;) {
        const std::string name = "layers/" + std::to_string(chunk_first_layer(c) + l);
        std::vector<Parameter<T>*> dense, experts;
        for (Parameter<T>* p : layers_[local(c, l)]->parameters())
          (layers_[local(c, l)]->is_expert_parameter(p) ? experts : dense).push_back(p);
        add(name, dense);
        if (expert_buckets_) add(name + "/experts", experts, true);
        ++step;
      }
    if (embedding_) add("embedding", embedding_->parameters());
    const GradientPool pool = gradient_pool(extents, sharding_.gradients || expert_sharding_.gradients);
    util::MemoryCategoryScope as(util::MemoryCategory::gradients);
    for (int k = 0; k < pool.slots; ++k)
      gradient_pool_.emplace_back("tptrain::gradient_pool." + std::to_string(k), pool.slot_elements);
    const bool gather = sharding_.parameters || expert_sharding_.parameters;
    gathering_.allocate(gathered_weight_offsets(extents, gather, sharding_.reshard_after_forward),
                        gathered_weights(extents, gather, sharding_.reshard_after_forward));
    for (std::size_t k = 0; k < extents.size(); ++k) {
      if (module_buckets_.size() <= std::size_t(extents[k].step)) module_buckets_.resize(std::size_t(extents[k].step) + 1);
      module_buckets_[std::size_t(extents[k].step)].push_back(k);
    }
  }
  // Whether a bucket holding `params` keeps its whole gradient under sharded gradients: the word
  // embedding's when the head writes it too (src/model/spec/gradient_buckets.hpp).
  bool keeps_whole_gradient(const std::vector<Parameter<T>*>& params) {
    const bool head_writes_word = shape_.tie_embeddings || shape_.mtp_depth > 0;
    return head_writes_word && word() != nullptr && std::find(params.begin(), params.end(), word()) != params.end();
  }

  GptShape shape_;
  int batch_;
  Communicator& tp_;
  PipelineStage stage_;
  Recompute recompute_;
  Communicator* context_group_ = nullptr;  // bind_context
  OptimizerSharding sharding_;
  OptimizerSharding expert_sharding_;  // the expert buckets' (over the expert-data group)
  std::int64_t rows_;       // sequence_rows()
  Workspace<T> workspace_;  // before every member that takes buffers from it; the blocks' attention and MLP
                            // scratch in one shared region (block_descriptor.hpp's phase_region_bytes)
  int per_chunk_ = 0;        // blocks per chunk
  std::unique_ptr<VocabParallelEmbedding<T>> embedding_;        // first stage
  std::vector<std::unique_ptr<TransformerLayer<T>>> layers_;    // this stage's blocks
  std::unique_ptr<NormSublayer<T>> ln_f_;                         // last stage
  std::unique_ptr<VocabParallelCrossEntropy<T>> head_;          // last stage
  std::unique_ptr<Parameter<T>> word_copy_;                     // last stage, pipeline > 1, tied
  std::unique_ptr<Parameter<T>> lm_head_;                       // last stage, untied
  std::unique_ptr<MultiTokenPrediction<T>> mtp_;                // last stage, model.mtp_depth > 0
  std::map<int, kernels::Tokens> mtp_tokens_;                   // each slot's input tokens (its backward's)
  int mtp_slot_ = -1;                                           // the slot whose forward the modules hold
  kernels::Matrix<T> final_norm_out_;  // [rows, H] ln_f out (last stage)
  // [rows, H]: the residual stream's gradient, ping-ponged block by block (next: the one read)
  kernels::Matrix<T> residual_grad_, residual_grad_next_;
  std::vector<std::vector<Slot>> slots_;      // per chunk: activation slots (see the header comment)
  std::vector<kernels::Matrix<T>> received_grads_;  // reserve_received_gradients
  int bound_slot_ = 0, bound_chunk_ = 0;
  int head_slot_ = -1;                        // the slot whose forward the head holds (last stage)
  std::int64_t recomputed_blocks_ = 0, recomputed_heads_ = 0, recomputed_scores_ = 0;
  std::vector<GradBucket<T>> buckets_;
  std::vector<kernels::Vector<kx::acc_t<T>>> gradient_pool_;  // gradient_slots()
  ParameterGathering<T> gathering_;                           // sharded parameters
  std::vector<std::vector<std::size_t>> module_buckets_;      // by module (step of the backward)
  bool expert_buckets_ = false;  // has_expert_buckets
};

// Evaluation and scoring forwards, not counted in the statistics of training.
template <class T>
struct StatisticsPaused {
  explicit StatisticsPaused(GptModel<T>& m) : model(m) { model.count_statistics(false); }
  ~StatisticsPaused() { model.count_statistics(true); }
  StatisticsPaused(const StatisticsPaused&) = delete;
  StatisticsPaused& operator=(const StatisticsPaused&) = delete;
  GptModel<T>& model;
};

}  // namespace tptrain::model
