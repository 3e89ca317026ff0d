// Megatron VocabParallelEmbedding: each TP rank holds a contiguous block of (padded) vocabulary
// rows; a token outside the block looks up zero, and the all-reduce g sums the one non-zero
// row in. With sequence parallelism the all-reduce becomes a reduce-scatter
// (reduce_scatter_to_sequence_parallel_region): each rank keeps the sum of its own [n, H] tokens.
// After the reduction the position kind adds what it adds at the embedding (learned positions: a
// table's rows; rotary positions act in the attention instead and are not here).
#pragma once

#include <memory>

#include "kokkos_kernels/embedding.hpp"
#include "src/model/spec/gpt_shape.hpp"
#include "src/model/linear.hpp"
#include "src/model/spec/model_parameters.hpp"
#include "src/model/sublayer.hpp"

namespace tptrain::model {

template <class T>
struct VocabParallelEmbedding {
  Parameter<T> word;  // [V_padded/tp, H]; logical [V, H] in checkpoints
  // The position kind's part at the embedding (transformer_layer.hpp, make_position); null: none.
  std::unique_ptr<PositionSublayer<T>> position;
  std::int64_t vocab_start;
  int tp_rank;
  SequenceParallelBuffers<T> sp;  // enabled: the output and its gradient are [n, H] token shards

  VocabParallelEmbedding(const GptShape& s, const Communicator& tp, std::unique_ptr<PositionSublayer<T>> positions = nullptr)
      : word(make_parameter<T>(with_split(model_parameter(s, "embedding/word"), TensorSplit::column,
                                          "VocabParallelEmbedding"), tp)),
        position(std::move(positions)),
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
    if (!position) return;
    const kernels::Tokens& ids = first_position >= 0 ? positions : documents.positions;  // empty: each row's place
    position->add_to_embedding(exec, y, first_position, first_row(y), ids);
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
    std::vector<Parameter<T>*> ps{&word};
    if (position)
      for (Parameter<T>* p : position->parameters()) ps.push_back(p);
    return ps;
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
    if (position) position->embedding_backward(exec, dy, documents.segments);
  }
};

}  // namespace tptrain::model
