// The conjugate operators of Megatron's tensor parallelism (Shoeybi et al. 2019, section 3;
// Megatron-Core tensor_parallel/mappings.py), as named forward/backward pairs:
//
//   f = copy_to_tp_region:     forward identity,   backward all-reduce (sum) over the TP group
//   g = reduce_from_tp_region: forward all-reduce, backward identity
//
// f sits at the entry of a column-parallel layer: its input is replicated, and each rank's
// input gradient is only the part from its own output columns, so the backward sums them.
// g sits at the exit of a row-parallel layer: each rank's output is a partial sum over its
// input columns, so the forward sums them. Layers call only these, never MPI/NCCL directly.
// A one-rank group returns at once (collectives.hpp), so tensor = 1 runs the same code.
//
// Sequence parallelism (Korthikanti et al. 2022, section 4.2.2) replaces f and g by an
// all-gather and a reduce-scatter along the token dimension, so that LayerNorm and the residual
// stream between the tensor-parallel regions hold only n = N/t of the N = b·s tokens per rank:
//
//   gather_from_sequence_parallel_region:        forward all-gather [n, h] -> [N, h],
//                                                backward reduce-scatter (sum) [N, h] -> [n, h]
//   reduce_scatter_to_sequence_parallel_region:  forward reduce-scatter (sum) [N, h] -> [n, h],
//                                                backward all-gather [n, h] -> [N, h]
//
// The first enters a column-parallel layer (its input gradient is a partial sum, as with f,
// but each rank needs only its own tokens of it), the second leaves a row-parallel layer (the
// sum of g, of which each rank keeps its tokens). Rank r holds token rows [r·n, (r+1)·n) of the
// [N, h] activations: Megatron's [s, b, h] layout splits s in contiguous blocks, our rows are
// (b, s) and we split them in contiguous blocks too, so that both collectives move one
// contiguous block per rank. Every computation between the regions is per token (LayerNorm,
// residual adds, biases, the position embedding), so which tokens a rank holds does not matter.
#pragma once

#include "src/parallel/collectives.hpp"
#include "src/util/phases.hpp"

namespace tptrain::parallel {

template <class View>
void copy_to_tp_region_forward(Communicator& /*tp*/, const kx::ExecSpace& /*exec*/, const View& /*x*/) {
  // identity: every rank already holds the full input
}

template <class View>
void copy_to_tp_region_backward(Communicator& tp, const kx::ExecSpace& exec, const View& dx) {
  util::PhaseScope phase(util::Phase::tp_comm);
  all_reduce(tp, exec, dx, ReduceOp::sum);
}

// The same all-reduce, started but not completed: the caller queues independent work on exec
// (the weight-gradient GEMM, as Megatron's async tensor-parallel all-reduce in
// ColumnParallelLinear's backward) and then completes it with Request::wait_on(exec) before
// anything reads dx.
template <class View>
Request copy_to_tp_region_backward_start(Communicator& tp, const kx::ExecSpace& exec, const View& dx) {
  util::PhaseScope phase(util::Phase::tp_comm);
  return iall_reduce(tp, exec, dx, ReduceOp::sum);
}

template <class View>
void reduce_from_tp_region_forward(Communicator& tp, const kx::ExecSpace& exec, const View& y) {
  util::PhaseScope phase(util::Phase::tp_comm);
  all_reduce(tp, exec, y, ReduceOp::sum);
}

template <class View>
void reduce_from_tp_region_backward(Communicator& /*tp*/, const kx::ExecSpace& /*exec*/, const View& /*dy*/) {
  // identity: the gradient of a sum is passed unchanged to every addend
}

// Starts the all-gather of the shards [n, h] into full [N, h] (complete with wait_on(exec)).
template <class ShardView, class FullView>
Request gather_from_sequence_parallel_region_start(Communicator& tp, const kx::ExecSpace& exec, const ShardView& shard,
                                                   const FullView& full) {
  util::PhaseScope phase(util::Phase::tp_comm);
  return iall_gather(tp, exec, shard, full);
}

template <class ShardView, class FullView>
void gather_from_sequence_parallel_region_forward(Communicator& tp, const kx::ExecSpace& exec, const ShardView& shard,
                                                  const FullView& full) {
  gather_from_sequence_parallel_region_start(tp, exec, shard, full).wait_on(exec);
}

// The conjugate: each rank's [N, h] gradient is a partial sum; a rank keeps the sum of its rows.
template <class FullView, class ShardView>
Request gather_from_sequence_parallel_region_backward_start(Communicator& tp, const kx::ExecSpace& exec,
                                                            const FullView& dfull, const ShardView& dshard) {
  util::PhaseScope phase(util::Phase::tp_comm);
  return ireduce_scatter(tp, exec, dfull, dshard, ReduceOp::sum);
}

template <class FullView, class ShardView>
void reduce_scatter_to_sequence_parallel_region_forward(Communicator& tp, const kx::ExecSpace& exec,
                                                        const FullView& partial, const ShardView& shard) {
  util::PhaseScope phase(util::Phase::tp_comm);
  reduce_scatter(tp, exec, partial, shard, ReduceOp::sum);
}

// The conjugate: the gradient of a rank's rows of the sum goes to every addend in full.
template <class ShardView, class FullView>
void reduce_scatter_to_sequence_parallel_region_backward(Communicator& tp, const kx::ExecSpace& exec,
                                                         const ShardView& dshard, const FullView& dfull) {
  util::PhaseScope phase(util::Phase::tp_comm);
  all_gather(tp, exec, dshard, dfull);
}

// Parameters that act on a rank's sequence shard only (LayerNorm, the row-parallel biases) are
// replicated, but each rank's gradient covers its own tokens: the sum over the TP group is the
// gradient (Megatron's allreduce of the `sequence_parallel` parameters' gradients).
template <class View>
void sum_sequence_parallel_gradient(Communicator& tp, const kx::ExecSpace& exec, const View& grad) {
  util::PhaseScope phase(util::Phase::tp_comm);
  all_reduce(tp, exec, grad, ReduceOp::sum);
}

}  // namespace tptrain::parallel
