// The SwiGLU MLP (model.mlp = "swiglu", Shazeer 2020; Llama): fc is gate and up stacked
// ([N, 2F/tp]: this rank's slice of gate, then the same slice of up), a = silu(gate)·up on the
// slice, proj (down) row-parallel. Its parameters are its kind's rows (swiglu_mlp_kind.hpp); the
// biases are the specification's (model.linear_bias).
// Each expert of a mixture (mixture_of_experts.hpp) is this MLP too, built by expert(): the same
// layers and kernels on the rows the token dispatcher routes to it, its collectives the
// dispatcher's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kokkos_kernels/swiglu.hpp"
#include "src/model/dense_mlp_layers.hpp"
#include "src/model/spec/swiglu_mlp_kind.hpp"

namespace tptrain::model {

template <class T>
struct SwigluMlp final : DenseMlpLayers<T> {
  using Matrix = kernels::Matrix<T>;
  using DenseMlpLayers<T>::fc;
  using DenseMlpLayers<T>::proj;
  struct Saved {
    Matrix h;  // [N, 2F/tp] fc output: gate and up
  };
  static Saved make_saved(Workspace<T>& ws, const std::string& name, std::int64_t tokens, const GptShape& s,
                          BufferCategory c = BufferCategory::activation) {
    return {ws.matrix(name + ".h", c, tokens, 2 * std::int64_t(s.local_ffn()))};
  }

  Saved saved;  // the set of the micro-batch being computed (the owner may rebind it)
  Matrix a;     // [N, F/tp] shared scratch: silu(gate)·up (again in the backward)
  Matrix da;    // [N, F/tp]: dL/da, written over `a` (see backward_rows)
  Matrix dh;    // [N, 2F/tp] shared scratch: dL/d(gate, up)

  SwigluMlp(const std::string& name, const GptShape& s, std::int64_t tokens, const Communicator& tp, Workspace<T>& ws,
            const SavedPlacement& placement = {})
      : DenseMlpLayers<T>(name, s, tokens, tp),
        saved(make_saved(ws, placement.name_for(name), tokens, s, placement.category)),
        a(ws.matrix("mlp.a", BufferCategory::scratch, tokens, s.local_ffn(), ScratchPhase::mlp)),
        da(a),
        dh(ws.matrix("mlp.dh", BufferCategory::scratch, tokens, 2 * std::int64_t(s.local_ffn()), ScratchPhase::mlp)) {
    fc.skip_bias_add = false;  // fc adds its own bias (the gate's and the up's)
    this->attach_stage_buffers(ws);
  }

  // A mixture's expert: gate|up and down without biases, no buffers of its own (its rows are the
  // mixture's routed rows: forward_rows, backward_rows), and no collectives: the token
  // dispatcher gathers the tokens before every expert and reduces the outputs after them.
  static SwigluMlp expert(const ParameterSpec& gate_up, const ParameterSpec& down, const Communicator& tp) {
    return SwigluMlp(gate_up, down, tp);
  }

  // x has the layer's rows, or fewer without sequence parallelism (generation's new tokens,
  // computed in the leading rows of the buffers).
  void forward(const Exec& exec, Communicator& tp, const Matrix& x, const Matrix& y,
               bool add_output_bias = true) override {
    const std::int64_t n = this->forward_rows_of(x, saved.h);
    forward_rows(exec, tp, x, first_rows(saved.h, n), first_rows(a, n), y, add_output_bias);
  }
  void backward(const Exec& exec, Communicator& tp, const Matrix& dy, const Matrix& x, const Matrix& dx) override {
    backward_rows(exec, tp, dy, x, saved.h, a, da, dh, dx);
  }

  // On rows given with their buffers: h [rows, 2F/tp] = fc(x) (gate|up), act [rows, F/tp] =
  // silu(gate)·up, y = proj(act).
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
  // scratch (d_act may be act: the projection reads act for its weight gradient before it writes
  // d_act, RowParallelLinear::input_and_weight_gradients). dx may be dy's storage: nothing reads
  // dy after the projection's backward.
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

  std::shared_ptr<SublayerSaved> saved_set() const override { return box_saved(saved); }
  std::shared_ptr<SublayerSaved> make_saved_set(Workspace<T>& ws, const std::string& prefix,
                                                BufferCategory c) const override {
    return box_saved(make_saved(ws, prefix, this->tokens_, this->shape_, c));
  }
  void bind(const std::shared_ptr<SublayerSaved>& s) override { saved = unbox_saved<Saved>(s); }

 private:
  SwigluMlp(const ParameterSpec& gate_up, const ParameterSpec& down, const Communicator& tp)
      : DenseMlpLayers<T>(gate_up, down, tp) {
    fc.explicit_expert_comm = proj.explicit_expert_comm = true;
  }
};

}  // namespace tptrain::model
