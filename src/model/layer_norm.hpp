// LayerNorm (eps 1e-5, GPT-2 pre-LN), replicated on every TP rank: each rank normalises the same
// full-width input, so gamma/beta and their gradients stay identical across the group without
// communication.
#pragma once

#include "kokkos_kernels/layernorm.hpp"
#include "src/model/linear.hpp"
#include "src/model/workspace.hpp"

namespace tptrain::model {

template <class T>
struct LayerNorm {
  Parameter<T> weight, bias;  // [H], replicated
  using Acc = kx::acc_t<T>;
  kernels::Vector<Acc> mean, rstd;  // [N] saved for backward; fp32 statistics whatever T is
  kernels::Vector<Acc> column_scratch;  // column_sums_scratch(); empty: allocated per backward
  static constexpr double eps = 1e-5;

  LayerNorm(const std::string& name, int hidden, const Communicator& tp, std::int64_t tokens, Workspace<T>& ws)
      : weight(make_parameter<T>(name + "/weight", {hidden}, Sharding{}, tp, false, 0.0f, 1.0f)),
        bias(make_parameter<T>(name + "/bias", {hidden}, Sharding{}, tp, false, 0.0f, 0.0f)),
        mean(ws.template vector<Acc>(name + ".mean", BufferCategory::activation, tokens)),
        rstd(ws.template vector<Acc>(name + ".rstd", BufferCategory::activation, tokens)) {}
  LayerNorm(const std::string& name, int hidden, const Communicator& tp, std::int64_t tokens, Workspace<T>& ws,
            const GptShape& shape)
      : LayerNorm(name, hidden, tp, tokens, ws) {
    column_scratch = column_sums_scratch(ws, shape, tokens);
  }

  template <class XV, class YV>
  void forward(const Exec& exec, const XV& x /*[N, H]*/, const YV& y /*[N, H]*/) {
    PhaseScope phase(Phase::norms_elementwise);
    kernels::layernorm_forward(exec, x, weight.v(), bias.v(), y, mean, rstd, Acc(eps));
  }
  // x1 = x + r (the residual stream, stored), y = LayerNorm(x1): one pass instead of two.
  template <class XV, class RV, class X1V, class YV>
  void forward_add(const Exec& exec, const XV& x, const RV& r, const X1V& x1, const YV& y) {
    PhaseScope phase(Phase::norms_elementwise);
    kernels::add_layernorm_forward(exec, x, r, x1, weight.v(), bias.v(), y, mean, rstd, Acc(eps));
  }

  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, const DYV& dy, const XV& x, const DXV& dx /*[N, H] overwritten*/) {
    PhaseScope phase(Phase::norms_elementwise);
    if (holds_column_sums(column_scratch, x.extent(0), x.extent(1), 2))
      kernels::layernorm_backward(exec, dy, x, weight.v(), mean, rstd, dx, weight.dv(), bias.dv(), column_scratch);
    else
      kernels::layernorm_backward(exec, dy, x, weight.v(), mean, rstd, dx, weight.dv(), bias.dv());
  }
};

}  // namespace tptrain::model
