// The tied output layer and Megatron's VocabParallelCrossEntropy.
//
// logits = x · Wordᵀ is a column-parallel linear over the vocabulary (x enters through f), so
// each rank holds logits [N, V_padded/tp] of its vocabulary block. The loss
//   loss_i = log Σ_v exp(z_iv - m_i) + m_i - z_i,target
// needs three all-reduces over the TP group — the max m_i, the sum of exponentials and the
// target logit (held by exactly one rank) — and never gathers the full logits. Padding columns
// (vocabulary rows >= vocab_size) are excluded from the max and the sum, so the loss equals
// that of the unpadded model. With sequence parallelism x is this rank's [n, H] token shard:
// f becomes gather_from_sequence_parallel_region (all-gather in, reduce-scatter of dx out).
// The head is one [N, V_padded/tp] buffer: the backward writes dlogits over the logits (each
// element of the gradient needs only its own logit and the row statistics), so after backward
// the buffer holds the gradient until the next forward (GPT-2 124M, S 1024, micro-batch 8 in
// bf16: 824 MB instead of twice that).
#pragma once

#include "kokkos_kernels/cross_entropy.hpp"
#include "kokkos_kernels/gemm.hpp"
#include "kokkos_kernels/loss_sum.hpp"
#include "kokkos_kernels/token_shift.hpp"
#include "src/model/spec/gpt_shape.hpp"
#include "src/model/linear.hpp"
#include "src/model/workspace.hpp"

namespace tptrain::model {

template <class T>
struct VocabParallelCrossEntropy {
  std::int64_t vocab_start, valid_cols;
  kernels::Matrix<T> logits;  // [N, V_padded/tp]: the logits after forward, their gradient after backward
  // [N] per token, fp32 whatever T is (Megatron casts the logits to float for the loss): the
  // three TP all-reduces and the loss are fp32.
  kernels::Vector<kx::acc_t<T>> rowmax, sumexp, target_logit, loss;
  SequenceParallelBuffers<T> sp;  // enabled: x and dx are [n, H] token shards

  VocabParallelCrossEntropy(const GptShape& s, std::int64_t tokens, const Communicator& tp, Workspace<T>& ws)
      : vocab_start(s.vocab_start(tp.rank())),
        valid_cols(s.valid_vocab(tp.rank())),
        logits(ws.matrix("lm_head.logits", BufferCategory::stage, tokens, s.local_vocab())),
        rowmax(ws.template vector<kx::acc_t<T>>("lm_head.rowmax", BufferCategory::stage, tokens)),
        sumexp(ws.template vector<kx::acc_t<T>>("lm_head.sumexp", BufferCategory::stage, tokens)),
        target_logit(ws.template vector<kx::acc_t<T>>("lm_head.target_logit", BufferCategory::stage, tokens)),
        loss(ws.template vector<kx::acc_t<T>>("lm_head.loss", BufferCategory::stage, tokens)) {}

  // Local logits of the tied output layer.
  template <class XV>
  void logits_forward(const Exec& exec, Communicator& tp, const XV& x /*[N, H]*/, const Parameter<T>& word) {
    if (sp.enabled()) {
      parallel::gather_from_sequence_parallel_region_forward(tp, exec, x, sp.gathered);
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, sp.gathered, word.value_matrix(), logits);
      return;
    }
    parallel::copy_to_tp_region_forward(tp, exec, x);
    PhaseScope phase(Phase::gemm);
    kernels::linear_forward(exec, x, word.value_matrix(), logits);
  }

  // Per-token loss in `loss` (identical on every TP rank); returns the sum over the first
  // `count` tokens (all when count < 0; evaluation pads a last partial batch).
  template <class TV>
  double loss_forward(const Exec& exec, Communicator& tp, const TV& targets /*[N]*/,
                      std::int64_t count = -1) {
    loss_per_token(exec, tp, targets);
    PhaseScope phase(Phase::loss);
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), loss);
    double sum = 0;
    const std::int64_t n = count < 0 ? static_cast<std::int64_t>(h.extent(0)) : count;
    for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(h(i));
    return sum;
  }

  // The same summed on the device into `total` (+=), for a training step that copies its loss
  // to the host once, not once per micro-batch.
  template <class TV, class SV>
  void loss_forward(const Exec& exec, Communicator& tp, const TV& targets /*[N]*/, const SV& total) {
    loss_per_token(exec, tp, targets);
    PhaseScope phase(Phase::loss);
    kernels::accumulate_loss_sum(exec, loss, static_cast<std::int64_t>(loss.extent(0)), total);
  }

  template <class TV>
  void loss_per_token(const Exec& exec, Communicator& tp, const TV& targets /*[N]*/) {
    PhaseScope phase(Phase::loss);
    kernels::row_max(exec, logits, valid_cols, rowmax);
    tp_all_reduce(exec, tp, rowmax, parallel::ReduceOp::max);
    kernels::row_sum_exp(exec, logits, rowmax, valid_cols, sumexp);
    tp_all_reduce(exec, tp, sumexp, parallel::ReduceOp::sum);
    kernels::target_logit(exec, logits, targets, vocab_start, target_logit);
    tp_all_reduce(exec, tp, target_logit, parallel::ReduceOp::sum);
    kernels::cross_entropy_loss(exec, rowmax, sumexp, target_logit, loss);
  }

  // d(scale · Σ_i loss_i): dWord += dlogitsᵀ x; dx = dlogits · Word, all-reduced (f backward).
  // dlogits overwrite the logits (in place): a second backward needs the head's forward again.
  // ignore_negative_targets: rows whose target is negative have no loss and no gradient (multi-token
  // prediction's rows past the window; kernels::zero_ignored).
  template <class TV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const TV& targets, const XV& x, Parameter<T>& word,
                kx::acc_t<T> scale, const DXV& dx /*[N or n, H] overwritten*/, const bool ignore_negative_targets = false) {
    {
      PhaseScope phase(Phase::loss);
      kernels::cross_entropy_backward(exec, logits, rowmax, sumexp, targets, vocab_start, valid_cols,
                                      scale, logits);
      if (ignore_negative_targets) kernels::zero_ignored(exec, targets, logits);
    }
    const kernels::Matrix<T>& dlogits = logits;
    if (sp.enabled()) {
      // The forward's gathered input is not kept: gathered again for the weight gradient.
      parallel::gather_from_sequence_parallel_region_forward(tp, exec, x, sp.gathered);
      {
        PhaseScope phase(Phase::gemm);
        kernels::linear_backward_weight(exec, dlogits, sp.gathered, word.grad_matrix());
        kernels::linear_backward_input(exec, dlogits, word.value_matrix(), sp.partial);
      }
      parallel::gather_from_sequence_parallel_region_backward_start(tp, exec, sp.partial, dx).wait_on(exec);
      return;
    }
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_backward_weight(exec, dlogits, x, word.grad_matrix());
      kernels::linear_backward_input(exec, dlogits, word.value_matrix(), dx);
    }
    parallel::copy_to_tp_region_backward(tp, exec, dx);
  }

 private:
  // The three reductions of the loss over the vocabulary blocks.
  template <class V>
  static void tp_all_reduce(const Exec& exec, Communicator& tp, const V& v, parallel::ReduceOp op) {
    PhaseScope phase(Phase::tp_comm);
    parallel::all_reduce(tp, exec, v, op);
  }
};

}  // namespace tptrain::model
