// Megatron VocabParallelEmbedding: each TP rank holds a contiguous block of (padded) vocabulary
// rows; a token outside the block looks up zero, and the all-reduce g sums the one non-zero
// row in. The learned position embedding is replicated and added after the reduction (adding
// it before would count it tp times). With sequence parallelism the all-reduce becomes a
// reduce-scatter (reduce_scatter_to_sequence_parallel_region): each rank keeps the sum of its own
// [n, H] tokens, and adds the position rows of those tokens. Llama has no position embedding
// (positions enter as rotations of q and k).
#pragma once

#include "kokkos_kernels/embedding.hpp"
#include "src/model/spec/gpt_shape.hpp"
#include "src/model/linear.hpp"
#include "src/model/spec/model_parameters.hpp"

namespace tptrain::model {

template <class T>
struct VocabParallelEmbedding {
  Parameter<T> word;      // [V_padded/tp, H]; logical [V, H] in checkpoints
  Parameter<T> position;  // [S, H], replicated (gpt2 only)
  bool has_position;
  int S;
  std::int64_t vocab_start;
  int tp_rank;
  SequenceParallelBuffers<T> sp;  // enabled: the output and its gradient are [n, H] token shards

  VocabParallelEmbedding(const GptShape& s, const Communicator& tp)
      : word(make_parameter<T>(with_split(model_parameter(s, "embedding/word"), TensorSplit::column,
                                          "VocabParallelEmbedding"), tp)),
        position(s.rotary() ? Parameter<T>{}
                           : make_parameter<T>(with_split(model_parameter(s, "embedding/position"),
                                                          TensorSplit::replicated, "VocabParallelEmbedding"),
                                               tp)),
        has_position(!s.rotary()),
        S(s.seq_length),
        vocab_start(s.vocab_start(tp.rank())),
        tp_rank(tp.rank()) {}

  template <class TV, class YV>
  // first_position >= 0: the rows are one sequence's tokens from that position on (generation's
  // new tokens after the cached ones), or with `positions` [n] at those positions within their
  // documents; else the micro-batch's, row r at position r mod S or at the bound documents'.
  void forward(const Exec& exec, Communicator& tp, const TV& tokens /*[N]*/, const YV& y /*[N or n, H]*/,
               const std::int64_t first_position = -1, const kernels::Tokens& positions = {}) {
    if (sp.enabled()) {
      {
        PhaseScope phase(Phase::norms_elementwise);
        kernels::embedding_forward_masked(exec, tokens, word.value_matrix(), vocab_start, sp.partial);
      }
      parallel::reduce_scatter_to_sequence_parallel_region_forward(tp, exec, sp.partial, y);
    } else {
      {
        PhaseScope phase(Phase::norms_elementwise);
        kernels::embedding_forward_masked(exec, tokens, word.value_matrix(), vocab_start, y);
      }
      parallel::reduce_from_tp_region_forward(tp, exec, y);
    }
    if (!has_position) return;
    PhaseScope phase(Phase::norms_elementwise);
    const bool cached = first_position >= 0;
    const kernels::Tokens& ids = cached ? positions : documents.positions;  // empty: each row's place
    kernels::position_embedding_add(exec, position.value_matrix(), S, y,
                                    cached && ids.size() == 0 ? first_position : first_row(y), ids);
  }

  // The micro-batch's document positions (data.reset_positions; empty views: positions are the
  // rows' places in their sequences): the position ids [N] and the rows grouped by them, so that
  // the position gradient sums each id's rows in a fixed order (as the word gradient does).
  struct DocumentPositions {
    kernels::Tokens positions;
    const kernels::TokenSegments* segments = nullptr;
  };
  DocumentPositions documents;

  std::vector<Parameter<T>*> parameters() {
    if (!has_position) return {&word};
    return {&word, &position};
  }

  // `segments`: the micro-batch's tokens grouped by id (train::MicroBatchQueue), so
  // that the word-embedding gradient runs parallel over ids and columns.
  template <class DYV>
  void backward(const Exec& exec, Communicator& tp, const kernels::TokenSegments& segments, const DYV& dy /*[N, H]*/) {
    if (sp.enabled()) {
      // Every rank needs every token's gradient for its vocabulary rows; with all of them the
      // position gradient is computed whole on every rank and stays replicated (no sum needed).
      parallel::reduce_scatter_to_sequence_parallel_region_backward(tp, exec, dy, sp.gathered);
      gradients(exec, segments, sp.gathered);
    } else {
      parallel::reduce_from_tp_region_backward(tp, exec, dy);
      gradients(exec, segments, dy);
    }
  }

 private:
  template <class YV>
  std::int64_t first_row(const YV& y) const {
    return sp.enabled() ? std::int64_t(tp_rank) * static_cast<std::int64_t>(y.extent(0)) : 0;
  }
  template <class DYV>
  void gradients(const Exec& exec, const kernels::TokenSegments& segments, const DYV& dy /*[N, H]*/) {
    PhaseScope phase(Phase::norms_elementwise);
    kernels::embedding_backward_masked(exec, segments, dy, vocab_start, word.grad_matrix());
    if (!has_position) return;
    if (documents.segments) kernels::embedding_backward_masked(exec, *documents.segments, dy, 0, position.grad_matrix());
    else kernels::position_embedding_backward(exec, dy, S, position.grad_matrix());
  }
};

}  // namespace tptrain::model
