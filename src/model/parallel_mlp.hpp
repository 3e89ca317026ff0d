// Megatron ParallelMLP: fc column-parallel (H -> F/tp), GELU on the local slice (elementwise, so
// no communication), proj row-parallel (F/tp -> H, all-reduce g).
#pragma once

#include "kokkos_kernels/gelu.hpp"
#include "src/model/gpt_shape.hpp"
#include "src/model/linear.hpp"

namespace tptrain::model {

template <class T>
struct ParallelMLP {
  ColumnParallelLinear<T> fc;
  RowParallelLinear<T> proj;
  kernels::Matrix<T> h;   // [N, F/tp] fc output (pre-GELU)
  kernels::Matrix<T> a;   // [N, F/tp] GELU output
  kernels::Matrix<T> da;  // [N, F/tp]
  kernels::Matrix<T> dh;  // [N, F/tp]

  ParallelMLP(const std::string& name, const GptShape& s, std::int64_t tokens, const Communicator& tp)
      : fc(name + "/fc", s.hidden, s.ffn_hidden, 1, tp, 0.02f),
        proj(name + "/proj", s.ffn_hidden, s.hidden, tp, 0.02f / std::sqrt(2.0f * s.layers)),
        h(name + ".h", tokens, s.local_ffn()),
        a(name + ".a", tokens, s.local_ffn()),
        da(name + ".da", tokens, s.local_ffn()),
        dh(name + ".dh", tokens, s.local_ffn()) {}

  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x, const YV& y) {
    fc.forward(exec, tp, x, h);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::gelu_forward(exec, h, a);
    }
    proj.forward(exec, tp, a, y);
  }

  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy, const XV& x, const DXV& dx) {
    proj.backward(exec, tp, dy, a, da);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::gelu_backward(exec, da, h, dh);
    }
    fc.backward(exec, tp, dh, x, dx);
  }
};

}  // namespace tptrain::model
