// LayerNorm (model.norm = "layernorm"; its rows: src/model/spec/layernorm_kind.hpp), ε 1e-5,
// replicated on every TP rank: each rank normalises the same full-width input, so weight and bias
// and their gradients stay identical across the group without communication. With sequence
// parallelism each rank normalises only its own tokens: weight and bias stay replicated, their
// gradients become per-rank parts summed over the group (Parameter::sequence_parallel_gradient,
// from the row's sequence_parallel_sum).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kokkos_kernels/layernorm.hpp"
#include "src/model/linear.hpp"
#include "src/model/spec/layernorm_kind.hpp"
#include "src/model/sublayer.hpp"
#include "src/model/workspace.hpp"

namespace tptrain::model {

template <class T>
struct LayerNorm final : NormSublayer<T> {
  using Acc = kx::acc_t<T>;
  using Matrix = kernels::Matrix<T>;
  // What forward keeps for backward: the row statistics [rows], fp32 whatever T is.
  struct Saved {
    kernels::Vector<Acc> mean, rstd;
  };
  static Saved make_saved(Workspace<T>& ws, const std::string& name, std::int64_t rows,
                          BufferCategory c = BufferCategory::activation) {
    return {ws.template vector<Acc>(name + ".mean", c, rows), ws.template vector<Acc>(name + ".rstd", c, rows)};
  }

  Parameter<T> weight, bias;  // [H], replicated
  Saved saved;                // the set of the micro-batch being computed (the owner may rebind it)
  kernels::Vector<Acc> column_scratch;  // column_sums_scratch(); empty: allocated per backward
  static constexpr double eps = kLayerNormEps;
  std::int64_t rows_;

  // weight and bias [H], replicated (their specs' TensorSplit::replicated); `rows` of this rank.
  LayerNorm(const ParameterSpec& weight_spec, const ParameterSpec& bias_spec, const Communicator& tp,
            std::int64_t rows, Workspace<T>& ws, const SavedPlacement& placement = {})
      : weight(make_parameter<T>(with_split(weight_spec, TensorSplit::replicated, "LayerNorm"), tp)),
        bias(make_parameter<T>(with_split(bias_spec, TensorSplit::replicated, "LayerNorm"), tp)),
        saved(make_saved(ws, placement.name_for(place_name_of(weight_spec)), rows, placement.category)),
        rows_(rows) {}
  // In a model: the stage's column-sum scratch too.
  LayerNorm(const ParameterSpec& weight_spec, const ParameterSpec& bias_spec, const Communicator& tp,
            std::int64_t rows, Workspace<T>& ws, const GptShape& shape, std::int64_t tokens,
            const SavedPlacement& placement = {})
      : LayerNorm(weight_spec, bias_spec, tp, rows, ws, placement) {
    column_scratch = column_sums_scratch(ws, shape, tokens);
  }

  std::vector<Parameter<T>*> parameters() override { return {&weight, &bias}; }

  void forward(const Exec& exec, const Matrix& x, const Matrix& y) override {
    PhaseScope phase(Phase::norms_elementwise);
    const Saved st = stats_of(x.extent(0));
    kernels::layernorm_forward(exec, x, weight.value_vector(), bias.value_vector(), y, st.mean, st.rstd, Acc(eps));
  }
  void forward_add(const Exec& exec, const Matrix& x, const Matrix& r, const kernels::VectorUnmanaged<T>& r_bias,
                   const Matrix& x1, const Matrix& y) override {
    PhaseScope phase(Phase::norms_elementwise);
    const Saved st = stats_of(x.extent(0));
    if (r_bias.size() == 0)
      kernels::add_layernorm_forward(exec, x, r, x1, weight.value_vector(), bias.value_vector(), y, st.mean, st.rstd,
                                     Acc(eps));
    else
      kernels::add_bias_layernorm_forward(exec, x, r, r_bias, x1, weight.value_vector(), bias.value_vector(), y,
                                          st.mean, st.rstd, Acc(eps));
  }

  // The statistics of the forward's rows: all of saved's, or the first of them when the forward
  // runs on fewer rows than the layer was built for (generation, first_rows).
  Saved stats_of(std::size_t rows) const {
    const auto n = static_cast<std::int64_t>(rows);
    return {first_rows(saved.mean, n), first_rows(saved.rstd, n)};
  }

  void backward_add(const Exec& exec, const Matrix& dy, const Matrix& x, const Matrix& residual,
                    const Matrix& dx) override {
    PhaseScope phase(Phase::norms_elementwise);
    if (holds_column_sums(column_scratch, x.extent(0), x.extent(1), 2)) {
      kernels::layernorm_backward_add(exec, dy, x, weight.value_vector(), saved.mean, saved.rstd, residual, dx,
                                      weight.grad_vector(), bias.grad_vector(), column_scratch);
    } else {
      const kernels::Vector<Acc> ws("tptrain::LayerNorm::column_sums",
                                    kernels::column_sums_workspace_size(x.extent(0), x.extent(1), 2));
      kernels::layernorm_backward_add(exec, dy, x, weight.value_vector(), saved.mean, saved.rstd, residual, dx,
                                      weight.grad_vector(), bias.grad_vector(), ws);
      kx::fence(exec, "tptrain::LayerNorm: free the column-sum workspace");
    }
  }

  void backward(const Exec& exec, const Matrix& dy, const Matrix& x, const Matrix& dx) override {
    PhaseScope phase(Phase::norms_elementwise);
    if (holds_column_sums(column_scratch, x.extent(0), x.extent(1), 2))
      kernels::layernorm_backward(exec, dy, x, weight.value_vector(), saved.mean, saved.rstd, dx, weight.grad_vector(),
                                  bias.grad_vector(), column_scratch);
    else
      kernels::layernorm_backward(exec, dy, x, weight.value_vector(), saved.mean, saved.rstd, dx, weight.grad_vector(),
                                  bias.grad_vector());
  }

  std::shared_ptr<SublayerSaved> saved_set() const override { return box_saved(saved); }
  std::shared_ptr<SublayerSaved> make_saved_set(Workspace<T>& ws, const std::string& prefix,
                                                BufferCategory c) const override {
    return box_saved(make_saved(ws, prefix, rows_, c));
  }
  void bind(const std::shared_ptr<SublayerSaved>& s) override { saved = unbox_saved<Saved>(s); }
};

}  // namespace tptrain::model
