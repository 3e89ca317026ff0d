// GPT-2 with Megatron tensor parallelism (DESIGN.md "Model"): token + position embedding,
// `layers` pre-LN transformer blocks, final LayerNorm, logits through the tied word embedding,
// mean next-token cross-entropy. Forward and backward are written by hand; parameters hold
// gradients that accumulate over micro-batches until zero_grad().
#pragma once

#include <memory>
#include <vector>

#include "src/model/gpt_shape.hpp"
#include "src/model/transformer_layer.hpp"
#include "src/model/vocab_parallel_cross_entropy.hpp"
#include "src/model/vocab_parallel_embedding.hpp"

namespace tptrain::model {

template <class T>
class GptModel {
 public:
  GptModel(const GptShape& shape, int micro_batch, Communicator& tp, std::uint64_t seed)
      : shape_(shape), batch_(micro_batch), tp_(tp), embedding_(shape, tp),
        ln_f_("ln_f", shape.hidden, tp, tokens()), head_(shape, tokens(), tp),
        x_f_("ln_f.out", tokens(), shape.hidden),
        grad_a_("grad_a", tokens(), shape.hidden),
        grad_b_("grad_b", tokens(), shape.hidden) {
    shape_.validate();
    for (int l = 0; l < shape.layers; ++l) {
      layers_.push_back(std::make_unique<TransformerLayer<T>>("layers/" + std::to_string(l), shape,
                                                              micro_batch, tp));
    }
    for (int l = 0; l <= shape.layers; ++l)
      residual_.emplace_back("residual." + std::to_string(l), tokens(), shape.hidden);
    for (Parameter<T>* p : parameters()) allocate_and_initialise(*p, seed);
  }

  const GptShape& shape() const { return shape_; }
  int micro_batch() const { return batch_; }
  std::int64_t tokens() const { return std::int64_t(batch_) * shape_.seq_length; }
  Communicator& tp() const { return tp_; }

  // Every parameter once, in checkpoint order.
  std::vector<Parameter<T>*> parameters() {
    std::vector<Parameter<T>*> ps{&embedding_.word, &embedding_.position};
    for (auto& layer : layers_)
      for (Parameter<T>* p : layer->parameters()) ps.push_back(p);
    ps.push_back(&ln_f_.weight);
    ps.push_back(&ln_f_.bias);
    return ps;
  }

  // Runs the network up to the local logits [N, V_padded/tp] (left in local_logits()).
  template <class TV>
  void forward_logits(const Exec& exec, const TV& tokens /*[N]*/) {
    embedding_.forward(exec, tp_, tokens, residual_[0]);
    for (std::size_t l = 0; l < layers_.size(); ++l)
      layers_[l]->forward(exec, tp_, residual_[l], residual_[l + 1]);
    ln_f_.forward(exec, residual_.back(), x_f_);
    head_.logits_forward(exec, tp_, x_f_, embedding_.word);
  }
  const kernels::Matrix<T>& local_logits() const { return head_.logits; }

  // Sum over the micro-batch's tokens of the next-token loss (same on every TP rank); with
  // count >= 0, over its first `count` tokens only.
  template <class TV>
  double forward(const Exec& exec, const TV& tokens, const TV& targets, std::int64_t count = -1) {
    forward_logits(exec, tokens);
    return head_.loss_forward(exec, tp_, targets, count);
  }

  // Gradients of scale * (the sum returned by forward), accumulated into the parameters.
  template <class TV>
  void backward(const Exec& exec, const TV& tokens, const TV& targets, T scale) {
    head_.backward(exec, tp_, targets, x_f_, embedding_.word, scale, grad_a_);
    ln_f_.backward(exec, grad_a_, residual_.back(), grad_b_);
    for (std::size_t l = layers_.size(); l-- > 0;) {
      layers_[l]->backward(exec, tp_, grad_b_, residual_[l], grad_a_);
      std::swap(grad_a_, grad_b_);
    }
    embedding_.backward(exec, tp_, tokens, grad_b_);
  }

  void zero_grad(const Exec& exec) {
    for (Parameter<T>* p : parameters()) kernels::fill(exec, p->dv(), T(0));
  }

 private:
  GptShape shape_;
  int batch_;
  Communicator& tp_;
  VocabParallelEmbedding<T> embedding_;
  std::vector<std::unique_ptr<TransformerLayer<T>>> layers_;
  LayerNorm<T> ln_f_;
  VocabParallelCrossEntropy<T> head_;
  std::vector<kernels::Matrix<T>> residual_;  // L+1 of [N, H]: embedding out, each block's out
  kernels::Matrix<T> x_f_;                    // [N, H] ln_f out
  kernels::Matrix<T> grad_a_, grad_b_;        // [N, H] gradient ping-pong
};

}  // namespace tptrain::model
