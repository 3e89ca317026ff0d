// One GPT-2 block, pre-LayerNorm:  x1 = x + attn(ln_1(x));  y = x1 + mlp(ln_2(x1)).
// With sequence parallelism x, y, the LayerNorms and the residual adds work on this rank's
// [n, H] tokens (n = N/t) and the attention and MLP gather and reduce-scatter them
// (Korthikanti et al. 2022, Figure 5).
#pragma once

#include "kokkos_kernels/elementwise.hpp"
#include "src/model/layer_norm.hpp"
#include "src/model/parallel_attention.hpp"
#include "src/model/parallel_mlp.hpp"
#include "src/model/recompute.hpp"

namespace tptrain::model {

template <class T>
struct TransformerLayer {
  // Everything forward keeps for backward (besides the block input x, which the caller keeps):
  // one set per micro-batch in flight, or with recompute = full one set shared by every block.
  struct Saved {
    typename LayerNorm<T>::Saved ln_1, ln_2;
    typename ParallelAttention<T>::Saved attn;
    typename ParallelMLP<T>::Saved mlp;
    kernels::Matrix<T> a, x1, c;  // [rows, H]: ln_1 out, residual after attention, ln_2 out
  };

  LayerNorm<T> ln_1;
  ParallelAttention<T> attn;
  LayerNorm<T> ln_2;
  ParallelMLP<T> mlp;
  kernels::Matrix<T> a, x1, c;  // [rows, H] of the bound Saved set (bind)
  kernels::Matrix<T> out;       // [rows, H] shared scratch: attention, then MLP output before its residual add
  kernels::Matrix<T> g1, g2;    // [rows, H] shared backward scratch
  std::int64_t tokens_, rows_;  // N = micro_batch * seq_length; rows = N, or N/t with sequence parallelism
  GptShape shape_;

  // recompute = full: every block of the stage keeps its Saved buffers in one shared scratch set.
  TransformerLayer(const std::string& name, const GptShape& s, int batch, const Communicator& tp, Workspace<T>& ws,
                   Recompute recompute = Recompute::selective)
      : TransformerLayer(name, s, batch, tp, ws, recompute,
                         recompute == Recompute::full ? SavedPlacement{"recompute.block", BufferCategory::scratch}
                                                      : SavedPlacement{name, BufferCategory::activation}) {}

  TransformerLayer(const std::string& name, const GptShape& s, int batch, const Communicator& tp, Workspace<T>& ws,
                   Recompute recompute, const SavedPlacement& placement)
      : ln_1(name + "/ln_1", s.hidden, tp, s.sequence_rows(tokens(s, batch)), ws, s, tokens(s, batch),
             SavedPlacement{placement.prefix + "/ln_1", placement.category}),
        attn(name + "/attn", s, batch, tp, ws, recompute, SavedPlacement{placement.prefix + "/attn", placement.category}),
        ln_2(name + "/ln_2", s.hidden, tp, s.sequence_rows(tokens(s, batch)), ws, s, tokens(s, batch),
             SavedPlacement{placement.prefix + "/ln_2", placement.category}),
        mlp(name + "/mlp", s, tokens(s, batch), tp, ws, SavedPlacement{placement.prefix + "/mlp", placement.category}),
        a(ws.matrix(placement.prefix + ".a", placement.category, s.sequence_rows(tokens(s, batch)), s.hidden)),
        x1(ws.matrix(placement.prefix + ".x1", placement.category, s.sequence_rows(tokens(s, batch)), s.hidden)),
        c(ws.matrix(placement.prefix + ".c", placement.category, s.sequence_rows(tokens(s, batch)), s.hidden)),
        out(ws.matrix("block.out", BufferCategory::scratch, s.sequence_rows(tokens(s, batch)), s.hidden)),
        g1(ws.matrix("block.grad_1", BufferCategory::scratch, s.sequence_rows(tokens(s, batch)), s.hidden)),
        g2(ws.matrix("block.grad_2", BufferCategory::scratch, s.sequence_rows(tokens(s, batch)), s.hidden)),
        tokens_(tokens(s, batch)), rows_(s.sequence_rows(tokens_)), shape_(s) {}

  static std::int64_t tokens(const GptShape& s, int batch) { return std::int64_t(batch) * s.seq_length; }

  // The set the constructor allocated (what the layer is bound to first).
  Saved current() const { return {ln_1.saved, ln_2.saved, attn.saved, mlp.saved, a, x1, c}; }
  // Another set, named `prefix` + buffer name, in category c.
  Saved make_saved(Workspace<T>& ws, const std::string& prefix, BufferCategory cat) const {
    return {LayerNorm<T>::make_saved(ws, prefix + "/ln_1", rows_, cat),
            LayerNorm<T>::make_saved(ws, prefix + "/ln_2", rows_, cat),
            attn.make_saved(ws, prefix + "/attn", cat),
            ParallelMLP<T>::make_saved(ws, prefix + "/mlp", tokens_, shape_, cat),
            ws.matrix(prefix + ".a", cat, rows_, shape_.hidden),
            ws.matrix(prefix + ".x1", cat, rows_, shape_.hidden),
            ws.matrix(prefix + ".c", cat, rows_, shape_.hidden)};
  }
  void bind(const Saved& s) {
    ln_1.saved = s.ln_1;
    ln_2.saved = s.ln_2;
    attn.saved = s.attn;
    mlp.saved = s.mlp;
    a = s.a;
    x1 = s.x1;
    c = s.c;
  }

  std::vector<Parameter<T>*> parameters() {
    return {&ln_1.weight, &ln_1.bias, &attn.qkv.weight, &attn.qkv.bias, &attn.proj.weight,
            &attn.proj.bias, &ln_2.weight, &ln_2.bias, &mlp.fc.weight, &mlp.fc.bias,
            &mlp.proj.weight, &mlp.proj.bias};
  }

  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x /*[rows, H]*/, const YV& y /*[rows, H]*/) {
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
