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
  kernels::Matrix<T> a, b, x1, c, d;  // [N, H]: ln_1 out, attn out, residual, ln_2 out, mlp out
  kernels::Matrix<T> g1, g2;          // [N, H] backward scratch

  TransformerLayer(const std::string& name, const GptShape& s, int batch, const Communicator& tp)
      : ln_1(name + "/ln_1", s.hidden, tp, tokens(s, batch)),
        attn(name + "/attn", s, batch, tp),
        ln_2(name + "/ln_2", s.hidden, tp, tokens(s, batch)),
        mlp(name + "/mlp", s, tokens(s, batch), tp),
        a(name + ".a", tokens(s, batch), s.hidden),
        b(name + ".b", tokens(s, batch), s.hidden),
        x1(name + ".x1", tokens(s, batch), s.hidden),
        c(name + ".c", tokens(s, batch), s.hidden),
        d(name + ".d", tokens(s, batch), s.hidden),
        g1(name + ".g1", tokens(s, batch), s.hidden),
        g2(name + ".g2", tokens(s, batch), s.hidden) {}

  static std::int64_t tokens(const GptShape& s, int batch) { return std::int64_t(batch) * s.seq_length; }

  std::vector<Parameter<T>*> parameters() {
    return {&ln_1.weight, &ln_1.bias, &attn.qkv.weight, &attn.qkv.bias, &attn.proj.weight,
            &attn.proj.bias, &ln_2.weight, &ln_2.bias, &mlp.fc.weight, &mlp.fc.bias,
            &mlp.proj.weight, &mlp.proj.bias};
  }

  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x /*[N, H]*/, const YV& y /*[N, H]*/) {
    ln_1.forward(exec, x, a);
    attn.forward(exec, tp, a, b);
    residual_add(exec, x, b, x1);
    ln_2.forward(exec, x1, c);
    mlp.forward(exec, tp, c, d);
    residual_add(exec, x1, d, y);
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
