// Learned positions (model.position = "learned"; its row: src/model/spec/learned_position_kind.hpp):
// a [S, H] table, replicated on every tensor rank and added after the word embedding's reduction
// (adding it before would count it tp times); with sequence parallelism each rank adds the rows of
// its own tokens. Its gradient sums each position's rows in a fixed order.
#pragma once

#include <vector>

#include "kokkos_kernels/embedding.hpp"
#include "src/model/linear.hpp"
#include "src/model/spec/learned_position_kind.hpp"
#include "src/model/sublayer.hpp"

namespace tptrain::model {

template <class T>
struct LearnedPosition final : PositionSublayer<T> {
  using Matrix = kernels::Matrix<T>;
  Parameter<T> table;  // [S, H]
  int S;

  LearnedPosition(const ParameterSpec& spec, const GptShape& s, const Communicator& tp)
      : table(make_parameter<T>(with_split(spec, TensorSplit::replicated, "the learned positions"), tp)),
        S(s.seq_length) {}

  std::vector<Parameter<T>*> parameters() override { return {&table}; }

  void add_to_embedding(const Exec& exec, const Matrix& y, std::int64_t first_position, std::int64_t first_row,
                        const kernels::Tokens& ids) override {
    PhaseScope phase(Phase::norms_elementwise);
    kernels::position_embedding_add(exec, table.value_matrix(), S, y,
                                    first_position >= 0 && ids.size() == 0 ? first_position : first_row, ids);
  }
  void embedding_backward(const Exec& exec, const Matrix& dy, const kernels::TokenSegments* segments) override {
    if (segments) kernels::embedding_backward_masked(exec, *segments, dy, 0, table.grad_matrix());
    else kernels::position_embedding_backward(exec, dy, S, table.grad_matrix());
  }
};

}  // namespace tptrain::model
