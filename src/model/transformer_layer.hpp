// One GPT-2 block, pre-LayerNorm:  x1 = x + attn(ln_1(x));  y = x1 + mlp(ln_2(x1)).
#pragma once

#include "kokkos_kernels/elementwise.hpp"
#include "src/model/layer_norm.hpp"
#include "src/model/parallel_attention.hpp"
#include "src/model/parallel_mlp.hpp"

namespace tptrain::model {

template <class T>
struct TransformerLayer {
  LayerNorm<T> ln_1;
  ParallelAttention<T> attn;
  LayerNorm<T> ln_2;
  ParallelMLP<T> mlp;
  kernels::Matrix<T> a, x1, c;  // [N, H] saved: ln_1 out, residual after attention, ln_2 out
  kernels::Matrix<T> out;       // [N, H] shared scratch: attention, then MLP output before its residual add
  kernels::Matrix<T> g1, g2;    // [N, H] shared backward scratch

  TransformerLayer(const std::string& name, const GptShape& s, int batch, const Communicator& tp, Workspace<T>& ws)
      : ln_1(name + "/ln_1", s.hidden, tp, tokens(s, batch), ws, s),
        attn(name + "/attn", s, batch, tp, ws),
        ln_2(name + "/ln_2", s.hidden, tp, tokens(s, batch), ws, s),
        mlp(name + "/mlp", s, tokens(s, batch), tp, ws),
        a(ws.matrix(name + ".a", BufferCategory::activation, tokens(s, batch), s.hidden)),
        x1(ws.matrix(name + ".x1", BufferCategory::activation, tokens(s, batch), s.hidden)),
        c(ws.matrix(name + ".c", BufferCategory::activation, tokens(s, batch), s.hidden)),
        out(ws.matrix("block.out", BufferCategory::scratch, tokens(s, batch), s.hidden)),
        g1(ws.matrix("block.grad_1", BufferCategory::scratch, tokens(s, batch), s.hidden)),
        g2(ws.matrix("block.grad_2", BufferCategory::scratch, tokens(s, batch), s.hidden)) {}

  static std::int64_t tokens(const GptShape& s, int batch) { return std::int64_t(batch) * s.seq_length; }

  std::vector<Parameter<T>*> parameters() {
    return {&ln_1.weight, &ln_1.bias, &attn.qkv.weight, &attn.qkv.bias, &attn.proj.weight,
            &attn.proj.bias, &ln_2.weight, &ln_2.bias, &mlp.fc.weight, &mlp.fc.bias,
            &mlp.proj.weight, &mlp.proj.bias};
  }

  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x /*[N, H]*/, const YV& y /*[N, H]*/) {
    ln_1.forward(exec, x, a);
    attn.forward(exec, tp, a, out);
    ln_2.forward_add(exec, x, out, x1, c);  // x1 = x + attention, c = ln_2(x1)
    mlp.forward(exec, tp, c, out);
    residual_add(exec, x1, out, y);
  }

  // dx = dL/dx from dy = dL/dy (dx overwritten).
  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy, const XV& x, const DXV& dx) {
    mlp.backward(exec, tp, dy, c, g1);   // g1 = d c
    ln_2.backward(exec, g1, x1, g2);     // g2 = d x1 through ln_2 ...
    residual_add(exec, g2, dy, g2);      // ... plus the residual path
    attn.backward(exec, tp, g2, a, g1);  // g1 = d a
    ln_1.backward(exec, g1, x, dx);
    residual_add(exec, dx, g2, dx);
  }

 private:
  template <class AV, class BV, class OV>
  static void residual_add(const Exec& exec, const AV& a, const BV& b, const OV& out) {
    PhaseScope phase(Phase::norms_elementwise);
    kernels::add(exec, a, b, out);
  }
};

}  // namespace tptrain::model
