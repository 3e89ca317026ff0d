// The squared-ReLU MLP (model.mlp = "relu2"; Primer, So et al. 2021): fc column-parallel
// (H -> F/tp), relu(h)² on the local slice, proj row-parallel (F/tp -> H, all-reduce g). Its
// parameters are its kind's rows (src/model/spec/relu2_mlp_kind.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kokkos_kernels/squared_relu.hpp"
#include "src/model/dense_mlp_layers.hpp"
#include "src/model/spec/relu2_mlp_kind.hpp"

namespace tptrain::model {

template <class T>
struct Relu2Mlp final : DenseMlpLayers<T> {
  using Matrix = kernels::Matrix<T>;
  using DenseMlpLayers<T>::fc;
  using DenseMlpLayers<T>::proj;
  struct Saved {
    Matrix h;  // [N, F/tp] fc output
  };
  static Saved make_saved(Workspace<T>& ws, const std::string& name, std::int64_t tokens, const GptShape& s,
                          BufferCategory c = BufferCategory::activation) {
    return {ws.matrix(name + ".h", c, tokens, s.local_ffn())};
  }

  Saved saved;  // the set of the micro-batch being computed (the owner may rebind it)
  // [N, F/tp] shared scratch: relu(h)² (again in the backward), then dL/da and dL/dh written over
  // it: the projection's backward reads a for its weight gradient before it writes its input
  // gradient (RowParallelLinear::input_and_weight_gradients).
  Matrix a;

  Relu2Mlp(const std::string& name, const GptShape& s, std::int64_t tokens, const Communicator& tp, Workspace<T>& ws,
           const SavedPlacement& placement = {})
      : DenseMlpLayers<T>(name, s, tokens, tp),
        saved(make_saved(ws, placement.name_for(name), tokens, s, placement.category)),
        a(ws.matrix("mlp.a", BufferCategory::scratch, tokens, s.local_ffn(), ScratchPhase::mlp)) {
    this->attach_stage_buffers(ws);
  }

  void forward(const Exec& exec, Communicator& tp, const Matrix& x, const Matrix& y,
               bool add_output_bias = true) override {
    const std::int64_t n = this->forward_rows_of(x, saved.h);
    const Matrix h = first_rows(saved.h, n), act = first_rows(a, n);
    fc.forward(exec, tp, x, h);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::squared_relu_forward(exec, h, act);
    }
    proj.forward(exec, tp, act, y, add_output_bias);
  }

  void backward(const Exec& exec, Communicator& tp, const Matrix& dy, const Matrix& x, const Matrix& dx) override {
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::squared_relu_forward(exec, saved.h, a);  // the scratch holds another layer's by now
    }
    proj.backward(exec, tp, dy, a, a);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::squared_relu_backward(exec, a, saved.h, a);
    }
    fc.backward(exec, tp, a, x, dx);
  }

  std::shared_ptr<SublayerSaved> saved_set() const override { return box_saved(saved); }
  std::shared_ptr<SublayerSaved> make_saved_set(Workspace<T>& ws, const std::string& prefix,
                                                BufferCategory c) const override {
    return box_saved(make_saved(ws, prefix, this->tokens_, this->shape_, c));
  }
  void bind(const std::shared_ptr<SublayerSaved>& s) override { saved = unbox_saved<Saved>(s); }
};

}  // namespace tptrain::model
