// Megatron ParallelAttention: QKV column-parallel with whole heads per rank (the QKV weight's
// Q, K and V row blocks are each split over the TP group, so a rank holds Q, K and V of its
// heads), causal attention of the local heads with no communication, output projection
// row-parallel (its all-reduce is g).
#pragma once

#include "kokkos_kernels/attention.hpp"
#include "src/model/gpt_shape.hpp"
#include "src/model/linear.hpp"
#include "src/model/workspace.hpp"

namespace tptrain::model {

template <class T>
struct ParallelAttention {
  ColumnParallelLinear<T> qkv;  // H -> 3H, 3 blocks
  RowParallelLinear<T> proj;    // H -> H
  int B, S, nh_local, d;
  kernels::Matrix<T> qkv_out;   // [N, 3*H/tp]
  kernels::Tensor4<T> att;      // [B, nh/tp, S, S] softmax probabilities
  kernels::Tensor4<T> dscores;  // [B, nh/tp, S, S] backward workspace
  kernels::Matrix<T> ctx;       // [N, H/tp] attention output before proj
  kernels::Matrix<T> d_ctx;     // [N, H/tp]
  kernels::Matrix<T> d_qkv;     // [N, 3*H/tp]

  ParallelAttention(const std::string& name, const GptShape& s, int batch, const Communicator& tp, Workspace<T>& ws)
      : qkv(name + "/qkv", s.hidden, 3 * std::int64_t(s.hidden), 3, tp, 0.02f),
        // GPT-2 scales the residual projections by 1/sqrt(2 * layers).
        proj(name + "/proj", s.hidden, s.hidden, tp, 0.02f / std::sqrt(2.0f * s.layers)),
        B(batch), S(s.seq_length), nh_local(s.local_heads()), d(s.head_dim()),
        qkv_out(ws.matrix(name + ".qkv_out", BufferCategory::activation, std::int64_t(batch) * S,
                          3 * std::int64_t(s.local_hidden()))),
        att(ws.tensor4(name + ".att", BufferCategory::activation, batch, nh_local, S, S)),
        dscores(ws.tensor4("attention.dscores", BufferCategory::scratch, batch, nh_local, S, S)),
        ctx(ws.matrix(name + ".ctx", BufferCategory::activation, std::int64_t(batch) * S, s.local_hidden())),
        d_ctx(ws.matrix("attention.d_ctx", BufferCategory::scratch, std::int64_t(batch) * S, s.local_hidden())),
        d_qkv(ws.matrix("attention.d_qkv", BufferCategory::scratch, std::int64_t(batch) * S,
                        3 * std::int64_t(s.local_hidden()))) {}

  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x /*[N, H]*/, const YV& y /*[N, H]*/) {
    qkv.forward(exec, tp, x, qkv_out);
    {
      PhaseScope phase(Phase::attention);
      kernels::attention_forward(exec, qkv_out, ctx, att, B, S, nh_local, d);
    }
    proj.forward(exec, tp, ctx, y);
  }

  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy, const XV& x, const DXV& dx) {
    proj.backward(exec, tp, dy, ctx, d_ctx);
    {
      PhaseScope phase(Phase::attention);
      kernels::attention_backward(exec, d_ctx, qkv_out, att, d_qkv, dscores);
    }
    qkv.backward(exec, tp, d_qkv, x, dx);
  }
};

}  // namespace tptrain::model
