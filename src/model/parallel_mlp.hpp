// Megatron ParallelMLP: fc column-parallel (H -> F/tp), GELU on the local slice (elementwise, so
// no communication), proj row-parallel (F/tp -> H, all-reduce g). Its parameters are the block
// descriptor's mlp/ rows (src/model/block_descriptor.hpp): "<block>/mlp/fc/weight", ...
// SwiGLU (model.mlp = "swiglu", Shazeer 2020): fc is gate and up stacked ([N, 2F/tp]: this rank's
// slice of gate, then the same slice of up), a = silu(gate)·up on the slice, proj (down)
// row-parallel. The biases are the specification's (model.linear_bias).
// Each expert of a mixture (mixture_of_experts.hpp) is this SwiGLU MLP too, built by expert():
// the same layers and kernels on the rows the token dispatcher routes to it, its collectives the
// dispatcher's.
#pragma once

#include <string>
#include <vector>

#include "kokkos_kernels/gelu.hpp"
#include "kokkos_kernels/swiglu.hpp"
#include "src/model/block_descriptor.hpp"
#include "src/model/gpt_shape.hpp"
#include "src/model/linear.hpp"
#include "src/model/workspace.hpp"

namespace tptrain::model {

template <class T>
struct ParallelMLP {
  // What forward keeps for backward.
  struct Saved {
    kernels::Matrix<T> h;    // [N, F/tp] fc output (pre-GELU); llama: [N, 2F/tp] gate and up
    kernels::Matrix<T> sig;  // [N, F/tp] σ(2u(h)) of the GELU: the backward needs no exp (llama: empty)
  };
  static Saved make_saved(Workspace<T>& ws, const std::string& name, std::int64_t tokens, const GptShape& s,
                          BufferCategory c = BufferCategory::activation) {
    if (s.swiglu()) return {ws.matrix(name + ".h", c, tokens, 2 * std::int64_t(s.local_ffn())), {}};
    return {ws.matrix(name + ".h", c, tokens, s.local_ffn()), ws.matrix(name + ".sigmoid", c, tokens, s.local_ffn())};
  }

  ColumnParallelLinear<T> fc;
  RowParallelLinear<T> proj;
  Saved saved;             // the set of the micro-batch being computed (the owner may rebind it)
  kernels::Matrix<T> a;    // [N, F/tp] shared scratch: GELU output (again h·σ in the backward)
  // [N, F/tp]: dL/da, then dL/dh in place (llama: dL/da), written over `a`: the projection's
  // backward reads a for its weight gradient before it writes its input gradient
  // (RowParallelLinear::input_and_weight_gradients), and nothing reads a after that.
  kernels::Matrix<T> da;
  kernels::Matrix<T> dh;   // llama: [N, 2F/tp] shared scratch: dL/d(gate, up)
  bool swiglu;

  ParallelMLP(const std::string& name, const GptShape& s, std::int64_t tokens, const Communicator& tp,
              Workspace<T>& ws, const SavedPlacement& placement = {})
      : fc(linear_of<ColumnParallelLinear<T>>(block_parameter(s, name + "/fc/weight"),
                                               block_parameter_if_held(s, name + "/fc/bias"), tp)),
        proj(linear_of<RowParallelLinear<T>>(block_parameter(s, name + "/proj/weight"),
                                             block_parameter_if_held(s, name + "/proj/bias"), tp)),
        saved(make_saved(ws, placement.name_for(name), tokens, s, placement.category)),
        a(ws.matrix("mlp.a", BufferCategory::scratch, tokens, s.local_ffn(), ScratchPhase::mlp)),
        da(a),
        swiglu(s.swiglu()) {
    if (swiglu) dh = ws.matrix("mlp.dh", BufferCategory::scratch, tokens, 2 * std::int64_t(s.local_ffn()), ScratchPhase::mlp);
    fc.skip_bias_add = !swiglu;  // GELU: added by the fused bias + GELU; SwiGLU: by fc itself
    fc.column_scratch = proj.column_scratch = column_sums_scratch(ws, s, tokens);
    fc.sp = proj.sp = sequence_parallel_buffers(ws, s, tokens);
  }

  // A mixture's expert: gate|up and down without biases, no buffers of its own (its rows are the
  // mixture's routed rows: forward_rows, backward_rows), and no collectives: the token
  // dispatcher gathers the tokens before every expert and reduces the outputs after them.
  static ParallelMLP expert(const ParameterSpec& gate_up, const ParameterSpec& down, const Communicator& tp) {
    return ParallelMLP(gate_up, down, tp);
  }

  std::vector<Parameter<T>*> parameters() {
    std::vector<Parameter<T>*> ps = fc.parameters();
    for (Parameter<T>* p : proj.parameters()) ps.push_back(p);
    return ps;
  }

  // add_proj_bias = false: y is left without proj's bias, which the caller fuses into its
  // residual add (TransformerLayer).
  // x has the layer's rows, or fewer without sequence parallelism (generation's new tokens,
  // computed in the leading rows of the buffers).
  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x, const YV& y, const bool add_proj_bias = true) {
    const auto n = fc.sp.enabled() ? static_cast<std::int64_t>(saved.h.extent(0)) : static_cast<std::int64_t>(x.extent(0));
    const kernels::Matrix<T> h = first_rows(saved.h, n), act = first_rows(a, n);
    if (swiglu) return forward_rows(exec, tp, x, h, act, y, add_proj_bias);
    fc.forward(exec, tp, x, h);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::bias_gelu_forward(exec, h, fc.bias.value_vector(), act, first_rows(saved.sig, n));
    }
    proj.forward(exec, tp, act, y, add_proj_bias);
  }

  // SwiGLU on rows given with their buffers: h [rows, 2F/tp] = fc(x) (gate|up),
  // act [rows, F/tp] = silu(gate)·up, y = proj(act).
  template <class XV, class HV, class AV, class YV>
  void forward_rows(const Exec& exec, Communicator& tp, const XV& x, const HV& h, const AV& act, const YV& y,
                    const bool add_proj_bias = true) {
    fc.forward(exec, tp, x, h);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::silu_mul_forward(exec, h, act);
    }
    proj.forward(exec, tp, act, y, add_proj_bias);
  }

  // Its backward: dx from dy, h the forward's; act, d_act [rows, F/tp] and d_h [rows, 2F/tp]
  // scratch (d_act may be act: the projection reads act before it writes d_act). dx may be dy's
  // storage: nothing reads dy after the projection's backward.
  template <class DYV, class XV, class HV, class AV, class DAV, class DHV, class DXV>
  void backward_rows(const Exec& exec, Communicator& tp, const DYV& dy, const XV& x, const HV& h, const AV& act,
                     const DAV& d_act, const DHV& d_h, const DXV& dx) {
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::silu_mul_forward(exec, h, act);  // the scratch holds another layer's by now
    }
    proj.backward(exec, tp, dy, act, d_act);
    {
      PhaseScope phase(Phase::norms_elementwise);
      kernels::silu_mul_backward(exec, d_act, h, d_h);
    }
    fc.backward(exec, tp, d_h, x, dx);
  }

  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy, const XV& x, const DXV& dx) {
    if (swiglu) return backward_rows(exec, tp, dy, x, saved.h, a, da, dh, dx);
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
        const kernels::Vector<kx::acc_t<T>> ws("tptrain::ParallelMLP::column_sums",
                                               kernels::column_sums_workspace_size(da.extent(0), da.extent(1)));
        kernels::gelu_backward_bias_grad(exec, da, saved.h, saved.sig, da, fc.bias.grad_vector(), ws);
        kx::fence(exec, "tptrain::ParallelMLP: free the column-sum workspace");
      }
    }
    fc.backward(exec, tp, da, x, dx, /*bias_gradient=*/false);
  }

 private:
  ParallelMLP(const ParameterSpec& gate_up, const ParameterSpec& down, const Communicator& tp)
      : fc(gate_up, tp), proj(down, tp), swiglu(true) {
    fc.explicit_expert_comm = proj.explicit_expert_comm = true;
  }
};

}  // namespace tptrain::model
