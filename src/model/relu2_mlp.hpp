// The squared-ReLU MLP (model.mlp = "relu2"; Primer, So et al. 2021): fc column-parallel
// (H -> F/tp), relu(h)² on the local slice, proj row-parallel (F/tp -> H, all-reduce g). Its
// parameters are its kind's rows (src/model/spec/relu2_mlp_kind.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kokkos_kernels/squared_relu.hpp"
#include "src/model/linear.hpp"
#include "src/model/spec/block_descriptor.hpp"
#include "src/model/spec/relu2_mlp_kind.hpp"
#include "src/model/sublayer.hpp"
#include "src/model/workspace.hpp"

namespace tptrain::model {

template <class T>
struct Relu2Mlp final : MlpSublayer<T> {
  using Matrix = kernels::Matrix<T>;
  struct Saved {
    Matrix h;  // [N, F/tp] fc output
  };
  static Saved make_saved(Workspace<T>& ws, const std::string& name, std::int64_t tokens, const GptShape& s,
                          BufferCategory c = BufferCategory::activation) {
    return {ws.matrix(name + ".h", c, tokens, s.local_ffn())};
  }

  ColumnParallelLinear<T> fc;
  RowParallelLinear<T> proj;
  Saved saved;  // the set of the micro-batch being computed (the owner may rebind it)
  // [N, F/tp] shared scratch: relu(h)² (again in the backward), then dL/da and dL/dh written over
  // it: the projection's backward reads a for its weight gradient before it writes its input
  // gradient (RowParallelLinear::input_and_weight_gradients).
  Matrix a;
  std::int64_t tokens_;
  GptShape shape_;

  Relu2Mlp(const std::string& name, const GptShape& s, std::int64_t tokens, const Communicator& tp, Workspace<T>& ws,
           const SavedPlacement& placement = {})
      : fc(linear_of<ColumnParallelLinear<T>>(block_parameter(s, name + "/fc/weight"),
                                               block_parameter_if_held(s, name + "/fc/bias"), tp)),
        proj(linear_of<RowParallelLinear<T>>(block_parameter(s, name + "/proj/weight"),
                                             block_parameter_if_held(s, name + "/proj/bias"), tp)),
        saved(make_saved(ws, placement.name_for(name), tokens, s, placement.category)),
        a(ws.matrix("mlp.a", BufferCategory::scratch, tokens, s.local_ffn(), ScratchPhase::mlp)),
        tokens_(tokens), shape_(s) {
    fc.column_scratch = proj.column_scratch = column_sums_scratch(ws, s, tokens);
    fc.sp = proj.sp = sequence_parallel_buffers(ws, s, tokens);
  }

  std::vector<Parameter<T>*> parameters() override {
    std::vector<Parameter<T>*> ps = fc.parameters();
    for (Parameter<T>* p : proj.parameters()) ps.push_back(p);
    return ps;
  }
  const Parameter<T>* output_bias() const override { return proj.has_bias ? &proj.bias : nullptr; }

  void forward(const Exec& exec, Communicator& tp, const Matrix& x, const Matrix& y,
               bool add_output_bias = true) override {
    const auto n = fc.sp.enabled() ? static_cast<std::int64_t>(saved.h.extent(0)) : static_cast<std::int64_t>(x.extent(0));
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
    return box_saved(make_saved(ws, prefix, tokens_, shape_, c));
  }
  void bind(const std::shared_ptr<SublayerSaved>& s) override { saved = unbox_saved<Saved>(s); }
};

}  // namespace tptrain::model
