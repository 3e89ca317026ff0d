// ColumnParallelLinear and RowParallelLinear (Megatron-LM section 3): y = x Wᵀ + b with
// W [out, in] split by output rows (column-parallel) or by input columns (row-parallel).
#pragma once

#include "kokkos_kernels/bias.hpp"
#include "kokkos_kernels/column_sums.hpp"
#include "kokkos_kernels/gemm.hpp"
#include "src/model/gpt_shape.hpp"
#include "src/model/parameter.hpp"
#include "src/model/workspace.hpp"
#include "src/parallel/mappings.hpp"
#include "src/util/phases.hpp"

namespace tptrain::model {

using Exec = kx::ExecSpace;
using parallel::Communicator;
using util::Phase;
using util::PhaseScope;

template <class T>
Parameter<T> make_parameter(std::string name, std::vector<std::int64_t> shape, Sharding sharding,
                            const Communicator& tp, bool weight_decay, float init_std,
                            float init_const = 0.0f) {
  Parameter<T> p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.saved_rows = p.shape[0];
  p.sharding = sharding;
  p.tp_rank = tp.rank();
  p.tp_size = tp.size();
  p.weight_decay = weight_decay;
  p.init_std = init_std;
  p.init_const = init_const;
  return p;
}

// The partial sums of the two-stage column reductions (bias and LayerNorm parameter gradients,
// kernels/column_sums.hpp): one scratch buffer of the stage, sized for the widest of them, so that
// the backward allocates nothing.
// Partial sums are fp32 whatever the storage type (they accumulate into fp32 gradients).
template <class T>
kernels::Vector<kx::acc_t<T>> column_sums_scratch(Workspace<T>& ws, const GptShape& s, std::int64_t tokens) {
  std::int64_t n = kernels::column_sums_workspace_size(tokens, s.hidden, 2);  // LayerNorm: dγ, dβ
  for (std::int64_t cols : {3 * std::int64_t(s.local_hidden()), std::int64_t(s.hidden), std::int64_t(s.local_ffn())})
    n = std::max(n, kernels::column_sums_workspace_size(tokens, cols, 1));  // biases
  return ws.template vector<kx::acc_t<T>>("column_sums", BufferCategory::scratch, std::max<std::int64_t>(n, 1));
}

// Whether a layer's column_scratch holds the partials of `terms` column sums over [n, cols]
// (empty for a layer built on its own, outside a model: the kernels then allocate them).
template <class T>
bool holds_column_sums(const kernels::Vector<T>& scratch, std::int64_t n, std::int64_t cols, int terms = 1) {
  return scratch.extent(0) >= static_cast<std::size_t>(kernels::column_sums_workspace_size(n, cols, terms));
}

// db += Σ_rows dy, through the stage's scratch when the layer has it.
template <class DYV, class DBV, class T>
void bias_gradient(const Exec& exec, const DYV& dy, const DBV& db, const kernels::Vector<T>& scratch) {
  if (holds_column_sums(scratch, dy.extent(0), dy.extent(1)))
    kernels::bias_backward(exec, dy, db, scratch);
  else
    kernels::bias_backward(exec, dy, db);
}

// Output features split over the TP group: rank r computes its [N, out/tp] slice.
// `blocks` > 1 splits each of that many output blocks separately (QKV: 3 blocks).
template <class T>
struct ColumnParallelLinear {
  Parameter<T> weight;  // [out/tp, in]
  Parameter<T> bias;    // [out/tp]
  // Megatron's skip_bias_add: forward leaves the bias to the caller, which fuses it into the
  // next elementwise kernel (the MLP's bias + GELU).
  bool skip_bias_add = false;
  kernels::Vector<kx::acc_t<T>> column_scratch;  // column_sums_scratch(); empty: allocated per backward

  ColumnParallelLinear(const std::string& name, std::int64_t in, std::int64_t out, int blocks,
                       const Communicator& tp, float init_std)
      : weight(make_parameter<T>(name + "/weight", {out, in}, Sharding{0, blocks}, tp, true, init_std)),
        bias(make_parameter<T>(name + "/bias", {out}, Sharding{0, blocks}, tp, false, 0.0f)) {}

  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x /*[N, in]*/, const YV& y /*[N, out/tp]*/) {
    parallel::copy_to_tp_region_forward(tp, exec, x);  // f: identity
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, x, weight.w(), y);
    }
    if (skip_bias_add) return;
    PhaseScope phase(Phase::norms_elementwise);
    kernels::bias_add(exec, y, bias.v());
  }

  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy /*[N, out/tp]*/, const XV& x /*[N, in]*/,
                const DXV& dx /*[N, in]*/) {
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_backward_input(exec, dy, weight.w(), dx);  // partial: this rank's columns
    }
    // f: the all-reduce of dx runs (on NCCL, on the communication stream) while the weight and
    // bias gradients, which do not read dx, are computed; only what reads dx waits for it.
    parallel::Request dx_sum = parallel::copy_to_tp_region_backward_start(tp, exec, dx);
    {
      PhaseScope phase(Phase::norms_elementwise);
      bias_gradient(exec, dy, bias.dv(), column_scratch);
    }
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_backward_weight(exec, dy, x, weight.dw());
    }
    PhaseScope phase(Phase::tp_comm);
    dx_sum.wait_on(exec);
  }
};

// Input features split over the TP group: rank r holds W[:, in/tp slice] and a [N, in/tp] input
// (the output of a column-parallel layer), so no communication is needed on entry; the partial
// outputs are summed by g. The bias is replicated and added once, after the reduction.
template <class T>
struct RowParallelLinear {
  Parameter<T> weight;  // [out, in/tp]
  Parameter<T> bias;    // [out], replicated
  kernels::Vector<kx::acc_t<T>> column_scratch;  // column_sums_scratch(); empty: allocated per backward

  RowParallelLinear(const std::string& name, std::int64_t in, std::int64_t out, const Communicator& tp,
                    float init_std)
      : weight(make_parameter<T>(name + "/weight", {out, in}, Sharding{1, 1}, tp, true, init_std)),
        bias(make_parameter<T>(name + "/bias", {out}, Sharding{}, tp, false, 0.0f)) {}

  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x /*[N, in/tp]*/, const YV& y /*[N, out]*/) {
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, x, weight.w(), y);
    }
    parallel::reduce_from_tp_region_forward(tp, exec, y);  // g: all-reduce partial sums
    PhaseScope phase(Phase::norms_elementwise);
    kernels::bias_add(exec, y, bias.v());
  }

  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy /*[N, out]*/, const XV& x /*[N, in/tp]*/,
                const DXV& dx /*[N, in/tp]*/) {
    parallel::reduce_from_tp_region_backward(tp, exec, dy);  // g: identity
    {
      PhaseScope phase(Phase::norms_elementwise);
      bias_gradient(exec, dy, bias.dv(), column_scratch);  // same dy on every rank: stays replicated
    }
    PhaseScope phase(Phase::gemm);
    kernels::linear_backward_weight(exec, dy, x, weight.dw());
    kernels::linear_backward_input(exec, dy, weight.w(), dx);
  }
};

}  // namespace tptrain::model
