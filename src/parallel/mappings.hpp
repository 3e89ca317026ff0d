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

}  // namespace tptrain::parallel
