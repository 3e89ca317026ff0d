// The GELU MLP (model.mlp = "gelu"; Megatron's ParallelMLP): fc column-parallel (H -> F/tp), GELU
// on the local slice (elementwise, so no communication), proj row-parallel (F/tp -> H, all-reduce
// g). Its parameters are its kind's rows (gelu_mlp_kind.hpp): "<block>/mlp/fc/weight", ...; the
// biases are the specification's (model.linear_bias).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kokkos_kernels/gelu.hpp"
#include "src/model/dense_mlp_layers.hpp"
#include "src/model/spec/gelu_mlp_kind.hpp"

namespace tptrain::model {

template <class T>
struct GeluMlp final : DenseMlpLayers<T> {
  using Matrix = kernels::Matrix<T>;
  using DenseMlpLayers<T>::fc;
  using DenseMlpLayers<T>::proj;
  // What forward keeps for backward.
  struct Saved {
    Matrix h;    // [N, F/tp] fc output (pre-GELU)
    Matrix sig;  // [N, F/tp] σ(2u(h)) of the GELU: the backward needs no exp
  };
  static Saved make_saved(Workspace<T>& ws, const std::string& name, std::int64_t tokens, const GptShape& s,
                          BufferCategory c = BufferCategory::activation) {
    return {ws.matrix(name + ".h", c, tokens, s.local_ffn()), ws.matrix(name + ".sigmoid", c, tokens, s.local_ffn())};
  }

  Saved saved;  // the set of the micro-batch being computed (the owner may rebind it)
  Matrix a;     // [N, F/tp] shared scratch: GELU output (again h·σ in the backward)
  // [N, F/tp]: dL/da, then dL/dh in place, written over `a`: the projection's backward reads a for
  // its weight gradient before it writes its input gradient
  // (RowParallelLinear::input_and_weight_gradients), and nothing reads a after that.
  Matrix da;

  GeluMlp(const std::string& name, const GptShape& s, std::int64_t tokens, const Communicator& tp, Workspace<T>& ws,
          const SavedPlacement& placement = {})
      : DenseMlpLayers<T>(name, s, tokens, tp),
        saved(make_saved(ws, placement.name_for(name), tokens, s, placement.category)),
        a(ws.matrix("mlp.a", BufferCategory::scratch, tokens, s.local_ffn(), ScratchPhase::mlp)),
        da(a) {
    fc.skip_bias_add = true;  // added by the fused bias + GELU
    this->attach_stage_buffers(ws);
  }

  // x has the layer's rows, or fewer without sequence parallelism (generation's new tokens,
  // computed in the leading rows of the buffers).
  void forward(const Exec& exec, Communicator& tp, const Matrix& x, const Matrix& y,
               bool add_output_bias = true) override {
    const std::int64_t n = this->forward_rows_of(x, saved.h);
    const Matrix h = first_rows(saved.h, n), act = first_rows(a, n);
    fc.forward(exec, tp, x, h);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::bias_gelu_forward(exec, h, fc.bias.value_vector(), act, first_rows(saved.sig, n));
    }
    proj.forward(exec, tp, act, y, add_output_bias);
  }

  void backward(const Exec& exec, Communicator& tp, const Matrix& dy, const Matrix& x, const Matrix& dx) override {
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::gelu_from_sigmoid(exec, saved.h, saved.sig, a);  // the scratch holds another layer's by now
    }
    proj.backward(exec, tp, dy, a, da);
    {
      // elementwise, in place; fc's bias gradient (the column sums of dL/dh) in the same pass
      PhaseScope phase(Phase::norms_elementwise);
      if (holds_column_sums(fc.column_scratch, da.extent(0), da.extent(1)))
        kernels::gelu_backward_bias_grad(exec, da, saved.h, saved.sig, da, fc.bias.grad_vector(), fc.column_scratch);
      else {  // a layer built on its own, outside a model: a workspace of this call
        const kernels::Vector<kx::acc_t<T>> ws("tptrain::GeluMlp::column_sums",
                                               kernels::column_sums_workspace_size(da.extent(0), da.extent(1)));
        kernels::gelu_backward_bias_grad(exec, da, saved.h, saved.sig, da, fc.bias.grad_vector(), ws);
        kx::fence(exec, "tptrain::GeluMlp: free the column-sum workspace");
      }
    }
    fc.backward(exec, tp, da, x, dx, /*bias_gradient=*/false);
  }

  std::shared_ptr<SublayerSaved> saved_set() const override { return box_saved(saved); }
  std::shared_ptr<SublayerSaved> make_saved_set(Workspace<T>& ws, const std::string& prefix,
                                                BufferCategory c) const override {
    return box_saved(make_saved(ws, prefix, this->tokens_, this->shape_, c));
  }
  void bind(const std::shared_ptr<SublayerSaved>& s) override { saved = unbox_saved<Saved>(s); }
};

}  // namespace tptrain::model
