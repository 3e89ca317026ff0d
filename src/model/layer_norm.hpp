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
  kernels::Vector<T> mean, rstd;  // [N] saved for backward
  static constexpr double eps = 1e-5;

  LayerNorm(const std::string& name, int hidden, const Communicator& tp, std::int64_t tokens, Workspace<T>& ws)
      : weight(make_parameter<T>(name + "/weight", {hidden}, Sharding{}, tp, false, 0.0f, 1.0f)),
        bias(make_parameter<T>(name + "/bias", {hidden}, Sharding{}, tp, false, 0.0f, 0.0f)),
        mean(ws.vector(name + ".mean", BufferCategory::activation, tokens)),
        rstd(ws.vector(name + ".rstd", BufferCategory::activation, tokens)) {}

  template <class XV, class YV>
  void forward(const Exec& exec, const XV& x /*[N, H]*/, const YV& y /*[N, H]*/) {
    PhaseScope phase(Phase::norms_elementwise);
    kernels::layernorm_forward(exec, x, weight.v(), bias.v(), y, mean, rstd, T(eps));
  }
  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, const DYV& dy, const XV& x, const DXV& dx /*[N, H] overwritten*/) {
    PhaseScope phase(Phase::norms_elementwise);
    kernels::layernorm_backward(exec, dy, x, weight.v(), mean, rstd, dx, weight.dv(), bias.dv());
  }
};

}  // namespace tptrain::model
