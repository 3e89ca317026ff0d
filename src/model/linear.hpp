// ColumnParallelLinear and RowParallelLinear (Megatron-LM section 3): y = x Wᵀ + b with
// W [out, in] split by output rows (column-parallel) or by input columns (row-parallel).
// With sequence parallelism (SequenceParallelBuffers given) the column-parallel input and the
// row-parallel output are this rank's [n, h] token shard, and the layers gather / reduce-scatter
// over the TP group instead of f's identity and g's all-reduce (parallel/mappings.hpp).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kokkos_kernels/bias.hpp"
#include "kokkos_kernels/column_sums.hpp"
#include "kokkos_kernels/gemm.hpp"
#include "src/model/spec/gpt_shape.hpp"
#include "src/model/parameter.hpp"
#include "src/model/spec/parameter_spec.hpp"
#include "src/model/workspace.hpp"
#include "src/parallel/mappings.hpp"
#include "src/util/phases.hpp"

namespace tptrain::model {

using Exec = kx::ExecSpace;
using parallel::Communicator;
using util::Phase;
using util::PhaseScope;

// The Parameter a descriptor row describes (src/model/spec/parameter_spec.hpp), as rank tp.rank()
// of the group holds it; its buffers come later (GptModel's buckets, or allocate_and_initialise).
template <class T>
Parameter<T> make_parameter(const ParameterSpec& spec, const Communicator& tp) {
  Parameter<T> p;
  p.name = spec.name;
  p.shape = spec.shape;
  p.saved_rows = spec.saved_rows;
  p.sharding = spec.split_dim() < 0 ? Sharding{}
                                    : Sharding::of(spec.split_dim(), spec.blocks, spec.block_extents,
                                                   spec.shape[static_cast<std::size_t>(spec.split_dim())]);
  p.tp_rank = tp.rank();
  p.tp_size = tp.size();
  p.weight_decay = spec.weight_decay;
  p.init_std = spec.init_std;
  p.init_const = spec.init_const;
  p.sequence_parallel_gradient = spec.sequence_parallel_gradient;
  return p;
}

// A layer computes with the split it was written for: a descriptor row that says otherwise is a
// programming error, caught when the layer is built.
inline const ParameterSpec& with_split(const ParameterSpec& spec, TensorSplit split, const char* layer) {
  if (spec.split != split)
    throw std::logic_error("tptrain: " + spec.name + ": " + layer +
                           " computes with another tensor-parallel split than its descriptor row states");
  return spec;
}

// The partial sums of the two-stage column reductions (bias and LayerNorm parameter gradients,
// kernels/column_sums.hpp): one scratch buffer of the stage, sized for the widest of them, so that
// the backward allocates nothing.
// Partial sums are fp32 whatever the storage type (they accumulate into fp32 gradients).
// Sized for the largest partials plus the largest column count, so that no call's partials reach
// another call's counts (kernels/column_sums.hpp); zeroed when allocated, as the counts need.
template <class T>
kernels::Vector<kx::acc_t<T>> column_sums_scratch(Workspace<T>& ws, const GptShape& s, std::int64_t tokens) {
  std::int64_t partials = kernels::column_sums_partials_size(tokens, s.hidden, 2);  // LayerNorm: dγ, dβ
  std::int64_t counts = kernels::column_sums_counts_size(tokens, s.hidden);
  for (std::int64_t cols : {3 * std::int64_t(s.local_hidden()), std::int64_t(s.hidden), std::int64_t(s.local_ffn())}) {
    partials = std::max(partials, kernels::column_sums_partials_size(tokens, cols, 1));  // biases
    counts = std::max(counts, kernels::column_sums_counts_size(tokens, cols));
  }
  return ws.template vector<kx::acc_t<T>>("column_sums", BufferCategory::scratch,
                                          std::max<std::int64_t>(partials + counts, 1));
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

// The two [N, h] buffers of sequence parallelism, shared by every layer of a stage (scratch):
// all N tokens of an activation or gradient gathered from the TP group, and a partial sum over
// the group before its reduce-scatter. Empty without sequence parallelism.
template <class T>
struct SequenceParallelBuffers {
  kernels::Matrix<T> gathered;  // [N, h]
  kernels::Matrix<T> partial;   // [N, h]
  bool enabled() const { return gathered.extent(0) > 0; }
};

template <class T>
SequenceParallelBuffers<T> sequence_parallel_buffers(Workspace<T>& ws, const GptShape& s, std::int64_t tokens) {
  if (!s.splits_sequence()) return {};
  return {ws.matrix("sequence_parallel.gathered", BufferCategory::scratch, tokens, s.hidden),
          ws.matrix("sequence_parallel.partial", BufferCategory::scratch, tokens, s.hidden)};
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
  SequenceParallelBuffers<T> sp;                 // enabled: x and dx are [n, in] token shards
  // An expert's layer (Megatron-Core's explicit_expert_comm): the mixture's token dispatcher
  // gathers the tokens once for all experts and reduces their input gradients after them, so f
  // and its backward all-reduce are not this layer's.
  bool explicit_expert_comm = false;

  bool has_bias = true;  // false: no bias (llama); `bias` is then an empty Parameter

  // weight [out, in] and bias [out], both split by columns (TensorSplit::column).
  ColumnParallelLinear(const ParameterSpec& weight_spec, const ParameterSpec& bias_spec, const Communicator& tp)
      : weight(make_parameter<T>(with_split(weight_spec, TensorSplit::column, "ColumnParallelLinear"), tp)),
        bias(make_parameter<T>(with_split(bias_spec, TensorSplit::column, "ColumnParallelLinear"), tp)) {}
  // Without a bias.
  ColumnParallelLinear(const ParameterSpec& weight_spec, const Communicator& tp)
      : weight(make_parameter<T>(with_split(weight_spec, TensorSplit::column, "ColumnParallelLinear"), tp)),
        has_bias(false) {}

  std::vector<Parameter<T>*> parameters() {
    if (!has_bias) return {&weight};
    return {&weight, &bias};
  }

  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x /*[N or n, in]*/, const YV& y /*[N, out/tp]*/) {
    if (sp.enabled()) {
      parallel::gather_from_sequence_parallel_region_forward(tp, exec, x, sp.gathered);
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, sp.gathered, weight.value_matrix(), y);
    } else {
      if (!explicit_expert_comm) parallel::copy_to_tp_region_forward(tp, exec, x);  // f: identity
      PhaseScope phase(Phase::gemm);
      kernels::linear_forward(exec, x, weight.value_matrix(), y);
    }
    if (skip_bias_add || !has_bias) return;
    PhaseScope phase(Phase::norms_elementwise);
    kernels::bias_add(exec, y, bias.value_vector());
  }

  // bias_gradient = false: the caller has added dy's column sums to the bias gradient already
  // (ParallelMLP: fused into the GELU backward).
  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy /*[N, out/tp]*/, const XV& x /*[N or n, in]*/,
                const DXV& dx /*[N or n, in]*/, const bool bias_gradient = true) {
    if (sp.enabled()) {
      backward_sequence_parallel(exec, tp, dy, x, dx, bias_gradient);
      return;
    }
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_backward_input(exec, dy, weight.value_matrix(), dx);  // partial: this rank's columns
    }
    // f: the all-reduce of dx runs (on NCCL, on the communication stream) while the weight and
    // bias gradients, which do not read dx, are computed; only what reads dx waits for it.
    parallel::Request dx_sum =
        explicit_expert_comm ? parallel::Request() : parallel::copy_to_tp_region_backward_start(tp, exec, dx);
    if (bias_gradient && has_bias) {
      PhaseScope phase(Phase::norms_elementwise);
      model::bias_gradient(exec, dy, bias.grad_vector(), column_scratch);
    }
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_backward_weight(exec, dy, x, weight.grad_matrix());
    }
    PhaseScope phase(Phase::tp_comm);
    dx_sum.wait_on(exec);
  }

 private:
  // Megatron's order (LinearWithGradAccumulationAndAsyncCommunication): the forward's gathered
  // input is not kept, so its all-gather runs again while the input-gradient GEMM computes the
  // [N, in] partial sum; that sum's reduce-scatter to this rank's tokens then runs while the
  // weight and bias gradients are computed.
  template <class DYV, class XV, class DXV>
  void backward_sequence_parallel(const Exec& exec, Communicator& tp, const DYV& dy, const XV& x, const DXV& dx,
                                  const bool bias_gradient) {
    parallel::Request gather = parallel::gather_from_sequence_parallel_region_start(tp, exec, x, sp.gathered);
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_backward_input(exec, dy, weight.value_matrix(), sp.partial);
    }
    {
      PhaseScope phase(Phase::tp_comm);
      gather.wait_on(exec);
    }
    parallel::Request dx_sum =
        parallel::gather_from_sequence_parallel_region_backward_start(tp, exec, sp.partial, dx);
    if (bias_gradient && has_bias) {
      PhaseScope phase(Phase::norms_elementwise);
      model::bias_gradient(exec, dy, bias.grad_vector(), column_scratch);
    }
    {
      PhaseScope phase(Phase::gemm);
      kernels::linear_backward_weight(exec, dy, sp.gathered, weight.grad_matrix());
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
  SequenceParallelBuffers<T> sp;                 // enabled: y and dy are [n, out] token shards
  // An expert's layer: its partial sums are weighted and reduced by the mixture's token
  // dispatcher after all experts (ColumnParallelLinear::explicit_expert_comm), not by g here.
  bool explicit_expert_comm = false;

  // weight [out, in] split by rows (TensorSplit::row); bias [out] replicated, and with sequence
  // parallelism added to this rank's tokens only (its spec's sequence_parallel_gradient).
  RowParallelLinear(const ParameterSpec& weight_spec, const ParameterSpec& bias_spec, const Communicator& tp)
      : weight(make_parameter<T>(with_split(weight_spec, TensorSplit::row, "RowParallelLinear"), tp)),
        bias(make_parameter<T>(with_split(bias_spec, TensorSplit::replicated, "RowParallelLinear"), tp)) {}
  // Without a bias (llama).
  RowParallelLinear(const ParameterSpec& weight_spec, const Communicator& tp)
      : weight(make_parameter<T>(with_split(weight_spec, TensorSplit::row, "RowParallelLinear"), tp)),
        has_bias(false) {}

  bool has_bias = true;

  std::vector<Parameter<T>*> parameters() {
    if (!has_bias) return {&weight};
    return {&weight, &bias};
  }

  // add_bias = false: Megatron's skip_bias_add for this call; the caller fuses the bias into its
  // next kernel (TransformerLayer: into the residual add).
  template <class XV, class YV>
  void forward(const Exec& exec, Communicator& tp, const XV& x /*[N, in/tp]*/, const YV& y /*[N or n, out]*/,
               const bool add_bias = true) {
    if (sp.enabled()) {
      {
        PhaseScope phase(Phase::gemm);
        kernels::linear_forward(exec, x, weight.value_matrix(), sp.partial);
      }
      parallel::reduce_scatter_to_sequence_parallel_region_forward(tp, exec, sp.partial, y);
    } else {
      {
        PhaseScope phase(Phase::gemm);
        kernels::linear_forward(exec, x, weight.value_matrix(), y);
      }
      if (!explicit_expert_comm) parallel::reduce_from_tp_region_forward(tp, exec, y);  // g: all-reduce partial sums
    }
    if (!add_bias || !has_bias) return;
    PhaseScope phase(Phase::norms_elementwise);
    kernels::bias_add(exec, y, bias.value_vector());
  }

  template <class DYV, class XV, class DXV>
  void backward(const Exec& exec, Communicator& tp, const DYV& dy /*[N or n, out]*/, const XV& x /*[N, in/tp]*/,
                const DXV& dx /*[N, in/tp]*/) {
    if (has_bias) {
      // Same dy on every rank: the bias gradient stays replicated; with sequence parallelism
      // it covers this rank's tokens (summed over the group later, sequence_parallel_gradient).
      PhaseScope phase(Phase::norms_elementwise);
      bias_gradient(exec, dy, bias.grad_vector(), column_scratch);
    }
    if (sp.enabled()) {
      parallel::reduce_scatter_to_sequence_parallel_region_backward(tp, exec, dy, sp.gathered);
      input_and_weight_gradients(exec, sp.gathered, x, dx);
    } else {
      if (!explicit_expert_comm) parallel::reduce_from_tp_region_backward(tp, exec, dy);  // g: identity
      input_and_weight_gradients(exec, dy, x, dx);
    }
  }

 private:
  // The weight gradient first: dx may be x's storage (ParallelMLP writes dL/da over a).
  template <class DYV, class XV, class DXV>
  void input_and_weight_gradients(const Exec& exec, const DYV& dy, const XV& x, const DXV& dx) {
    PhaseScope phase(Phase::gemm);
    kernels::linear_backward_weight(exec, dy, x, weight.grad_matrix());
    kernels::linear_backward_input(exec, dy, weight.value_matrix(), dx);
  }
};

// A linear layer with its bias when the block specification holds one (block_parameter_if_held).
template <class Layer>
Layer linear_of(const ParameterSpec& weight, const std::optional<ParameterSpec>& bias, const Communicator& tp) {
  return bias ? Layer(weight, *bias, tp) : Layer(weight, tp);
}

}  // namespace tptrain::model
