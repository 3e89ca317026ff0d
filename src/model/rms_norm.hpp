// RMSNorm (model.norm = "rmsnorm"; its rows: src/model/spec/rmsnorm_kind.hpp): a weight, no
// bias, ε model.norm_eps. Replicated on every TP rank as LayerNorm is (layer_norm.hpp), with the
// same sequence-parallel gradient sums.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kokkos_kernels/bias.hpp"
#include "kokkos_kernels/rmsnorm.hpp"
#include "src/model/linear.hpp"
#include "src/model/spec/rmsnorm_kind.hpp"
#include "src/model/sublayer.hpp"
#include "src/model/workspace.hpp"

namespace tptrain::model {

template <class T>
struct RmsNorm final : NormSublayer<T> {
  using Acc = kx::acc_t<T>;
  using Matrix = kernels::Matrix<T>;
  // What forward keeps for backward: 1/rms of each row [rows], fp32 whatever T is.
  struct Saved {
    kernels::Vector<Acc> rstd;
  };
  static Saved make_saved(Workspace<T>& ws, const std::string& name, std::int64_t rows,
                          BufferCategory c = BufferCategory::activation) {
    return {ws.template vector<Acc>(name + ".rstd", c, rows)};
  }

  Parameter<T> weight;  // [H], replicated
  Saved saved;
  kernels::Vector<Acc> column_scratch;  // column_sums_scratch(); empty: allocated per backward
  double eps;                           // model.norm_eps
  std::int64_t rows_;

  RmsNorm(const ParameterSpec& weight_spec, double norm_eps, const Communicator& tp, std::int64_t rows,
          Workspace<T>& ws, const GptShape& shape, std::int64_t tokens, const SavedPlacement& placement = {})
      : weight(make_parameter<T>(with_split(weight_spec, TensorSplit::replicated, "RMSNorm"), tp)),
        saved(make_saved(ws, placement.name_for(place_name_of(weight_spec)), rows, placement.category)),
        column_scratch(column_sums_scratch(ws, shape, tokens)),
        eps(norm_eps),
        rows_(rows) {}

  std::vector<Parameter<T>*> parameters() override { return {&weight}; }

  void forward(const Exec& exec, const Matrix& x, const Matrix& y) override {
    PhaseScope phase(Phase::norms_elementwise);
    kernels::rmsnorm_forward(exec, x, weight.value_vector(), y, rstd_of(x.extent(0)), Acc(eps));
  }
  void forward_add(const Exec& exec, const Matrix& x, const Matrix& r, const kernels::VectorUnmanaged<T>& r_bias,
                   const Matrix& x1, const Matrix& y) override {
    PhaseScope phase(Phase::norms_elementwise);
    if (r_bias.size() != 0) kernels::bias_add(exec, r, r_bias);  // no fused form with a bias: one launch more
    kernels::add_rmsnorm_forward(exec, x, r, x1, weight.value_vector(), y, rstd_of(x.extent(0)), Acc(eps));
  }

  // RMSNorm has no fused backward with the residual path: its backward, then the add (one launch more).
  void backward_add(const Exec& exec, const Matrix& dy, const Matrix& x, const Matrix& residual,
                    const Matrix& dx) override {
    backward(exec, dy, x, dx);
    PhaseScope phase(Phase::norms_elementwise);
    kernels::add_inplace(exec, dx, residual);
  }
  void backward(const Exec& exec, const Matrix& dy, const Matrix& x, const Matrix& dx) override {
    PhaseScope phase(Phase::norms_elementwise);
    if (holds_column_sums(column_scratch, x.extent(0), x.extent(1), 1))
      kernels::rmsnorm_backward(exec, dy, x, weight.value_vector(), saved.rstd, dx, weight.grad_vector(), column_scratch);
    else
      kernels::rmsnorm_backward(exec, dy, x, weight.value_vector(), saved.rstd, dx, weight.grad_vector());
  }

  std::shared_ptr<SublayerSaved> saved_set() const override { return box_saved(saved); }
  std::shared_ptr<SublayerSaved> make_saved_set(Workspace<T>& ws, const std::string& prefix,
                                                BufferCategory c) const override {
    return box_saved(make_saved(ws, prefix, rows_, c));
  }
  void bind(const std::shared_ptr<SublayerSaved>& s) override { saved = unbox_saved<Saved>(s); }

 private:
  // The forward's rows of rstd: all, or the first when it runs on fewer rows (generation).
  kernels::Vector<Acc> rstd_of(std::size_t rows) const { return first_rows(saved.rstd, static_cast<std::int64_t>(rows)); }
};

}  // namespace tptrain::model
