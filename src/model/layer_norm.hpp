// LayerNorm (eps 1e-5, GPT-2 pre-LN), or RMSNorm (llama: a weight, no bias, eps model.norm_eps;
// LayerNorm<T>::rms), replicated on every TP rank: each rank normalises the same
// full-width input, so gamma/beta and their gradients stay identical across the group without
// communication. With sequence parallelism each rank normalises only its own tokens: gamma and
// beta stay replicated, their gradients become per-rank parts summed over the group
// (Parameter::sequence_parallel_gradient, from the descriptor row's sequence_parallel_sum).
#pragma once

#include <string>
#include <utility>
#include <stdexcept>
#include <vector>

#include "kokkos_kernels/layernorm.hpp"
#include "kokkos_kernels/rmsnorm.hpp"
#include "src/model/linear.hpp"
#include "src/model/workspace.hpp"

namespace tptrain::model {

template <class T>
struct LayerNorm {
  using Acc = kx::acc_t<T>;
  // What forward keeps for backward: the row statistics [rows], fp32 whatever T is (RMSNorm:
  // rstd only, mean empty).
  struct Saved {
    kernels::Vector<Acc> mean, rstd;
  };
  static Saved make_saved(Workspace<T>& ws, const std::string& name, std::int64_t rows,
                          BufferCategory c = BufferCategory::activation, bool rms = false) {
    if (rms) return {{}, ws.template vector<Acc>(name + ".rstd", c, rows)};
    return {ws.template vector<Acc>(name + ".mean", c, rows), ws.template vector<Acc>(name + ".rstd", c, rows)};
  }

  Parameter<T> weight, bias;  // [H], replicated (RMSNorm: bias empty)
  Saved saved;                // the set of the micro-batch being computed (the owner may rebind it)
  kernels::Vector<Acc> column_scratch;  // column_sums_scratch(); empty: allocated per backward
  static constexpr double eps = kLayerNormEps;  // LayerNorm's (src/model/spec/block_spec.hpp)
  bool rms = false;                     // RMSNorm
  double rms_eps = 1e-5;                // RMSNorm's (model.norm_eps)

  // The layer's name, from its weight's: "layers/3/ln_1/weight" -> "layers/3/ln_1".
  static std::string name_of(const ParameterSpec& weight_spec) {
    const std::size_t slash = weight_spec.name.rfind('/');
    return slash == std::string::npos ? weight_spec.name : weight_spec.name.substr(0, slash);
  }

  // weight and bias [H], replicated (their specs' TensorSplit::replicated); `rows` of this rank.
  LayerNorm(const ParameterSpec& weight_spec, const ParameterSpec& bias_spec, const Communicator& tp,
            std::int64_t rows, Workspace<T>& ws, const SavedPlacement& placement = {})
      : weight(make_parameter<T>(with_split(weight_spec, TensorSplit::replicated, "LayerNorm"), tp)),
        bias(make_parameter<T>(with_split(bias_spec, TensorSplit::replicated, "LayerNorm"), tp)),
        saved(make_saved(ws, placement.name_for(name_of(weight_spec)), rows, placement.category)) {}
  // In a model: the stage's column-sum scratch too.
  LayerNorm(const ParameterSpec& weight_spec, const ParameterSpec& bias_spec, const Communicator& tp,
            std::int64_t rows, Workspace<T>& ws, const GptShape& shape, std::int64_t tokens,
            const SavedPlacement& placement = {})
      : LayerNorm(weight_spec, bias_spec, tp, rows, ws, placement) {
    column_scratch = column_sums_scratch(ws, shape, tokens);
  }

  // RMSNorm: weight [H] only, replicated; ε = `norm_eps`.
  LayerNorm(const ParameterSpec& weight_spec, double norm_eps, const Communicator& tp, std::int64_t rows,
            Workspace<T>& ws, const GptShape& shape, std::int64_t tokens, const SavedPlacement& placement = {})
      : weight(make_parameter<T>(with_split(weight_spec, TensorSplit::replicated, "RMSNorm"), tp)),
        saved(make_saved(ws, placement.name_for(name_of(weight_spec)), rows, placement.category, true)),
        rms(true),
        rms_eps(norm_eps) {
    column_scratch = column_sums_scratch(ws, shape, tokens);
  }

  std::vector<Parameter<T>*> parameters() {
    if (rms) return {&weight};
    return {&weight, &bias};
  }

  template <class XV, class YV>
  void forward(const Exec& exec, const XV& x /*[rows, H]*/, const YV& y /*[rows, H]*/) {
    PhaseScope phase(Phase::norms_elementwise);
    const Saved st = stats_of(x.extent(0));
    if (rms) return kernels::rmsnorm_forward(exec, x, weight.value_vector(), y, st.rstd, Acc(rms_eps));
    kernels::layernorm_forward(exec, x, weight.value_vector(), bias.value_vector(), y, st.mean, st.rstd, Acc(eps));
  }
  // x1 = x + r (the residual stream, stored), y = LayerNorm(x1): one pass instead of two.
  template <class XV, class RV, class X1V, class YV>
  void forward_add(const Exec& exec, const XV& x, const RV& r, const X1V& x1, const YV& y) {
    PhaseScope phase(Phase::norms_elementwise);
    const Saved st = stats_of(x.extent(0));
    if (rms) return kernels::add_rmsnorm_forward(exec, x, r, x1, weight.value_vector(), y, st.rstd, Acc(rms_eps));
    kernels::add_layernorm_forward(exec, x, r, x1, weight.value_vector(), bias.value_vector(), y, st.mean, st.rstd, Acc(eps));
  }

  // x1 = x + (r + r_bias) for a residual branch r whose bias its layer left out, y = LayerNorm(x1).
  template <class XV, class RV, class RBV, class X1V, class YV>
  void forward_add_bias(const Exec& exec, const XV& x, const RV& r, const RBV& r_bias, const X1V& x1, const YV& y) {
    PhaseScope phase(Phase::norms_elementwise);
    const Saved st = stats_of(x.extent(0));
    if (rms) {  // llama's branches have no bias (parallel_attention.hpp)
      if (r_bias.size() != 0) throw std::logic_error("tptrain: RMSNorm::forward_add_bias: llama's residual branches have no bias");
      return kernels::add_rmsnorm_forward(exec, x, r, x1, weight.value_vector(), y, st.rstd, Acc(rms_eps));
    }
    kernels::add_bias_layernorm_forward(exec, x, r, r_bias, x1, weight.value_vector(), bias.value_vector(), y, st.mean,
                                        st.rstd, Acc(eps));
  }

  // The statistics of the forward's rows: all of saved's, or the first of them when the forward
  // runs on fewer rows than the layer was built for (generation, first_rows).
  Saved stats_of(std::size_t rows) const {
    const auto n = static_cast<std::int64_t>(rows);
    return {saved.mean.size() == 0 ? saved.mean : first_rows(saved.mean, n), first_rows(saved.rstd, n)};
  }

  // dx = the gradient through the LayerNorm + residual (the block input's residual path), one pass.
  template <class DYV, class XV, class ResV, class DXV>
  void backward_add(const Exec& exec, const DYV& dy, const XV& x, const ResV& residual, const DXV& dx) {
    if (rms) {  // RMSNorm has no fused form: its backward, then the residual path (one launch more)
      backward(exec, dy, x, dx);
      PhaseScope phase(Phase::norms_elementwise);
      return kernels::add_inplace(exec, dx, residual);
    }
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

  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, const DYV& dy, const XV& x, const DXV& dx /*[rows, H] overwritten*/) {
    PhaseScope phase(Phase::norms_elementwise);
    if (rms) {
      if (holds_column_sums(column_scratch, x.extent(0), x.extent(1), 1))
        kernels::rmsnorm_backward(exec, dy, x, weight.value_vector(), saved.rstd, dx, weight.grad_vector(), column_scratch);
      else
        kernels::rmsnorm_backward(exec, dy, x, weight.value_vector(), saved.rstd, dx, weight.grad_vector());
      return;
    }
    if (holds_column_sums(column_scratch, x.extent(0), x.extent(1), 2))
      kernels::layernorm_backward(exec, dy, x, weight.value_vector(), saved.mean, saved.rstd, dx, weight.grad_vector(), bias.grad_vector(),
                                  column_scratch);
    else
      kernels::layernorm_backward(exec, dy, x, weight.value_vector(), saved.mean, saved.rstd, dx, weight.grad_vector(), bias.grad_vector());
  }
};

// The block's norm `name` ("layers/3/ln_1", "ln_f") for shape s: LayerNorm (gpt2) or RMSNorm
// (llama), its parameters from `spec` (block_parameter or model_parameter).
template <class T, class SpecOf>
LayerNorm<T> make_norm(const GptShape& s, const SpecOf& spec, const std::string& name, const Communicator& tp,
                       std::int64_t rows, Workspace<T>& ws, std::int64_t tokens, const SavedPlacement& placement) {
  if (s.rms()) return LayerNorm<T>(spec(name + "/weight"), s.norm_eps, tp, rows, ws, s, tokens, placement);
  return LayerNorm<T>(spec(name + "/weight"), spec(name + "/bias"), tp, rows, ws, s, tokens, placement);
}

}  // namespace tptrain::model
