// The per-parameter gradient norm, clipping and AdamW: one kernel per parameter, the plain form
// of what train::BucketOptimizer (src/train/optimizer.hpp) does per flat bucket, and the
// reference the tests hold it to (bit for bit for AdamW, to rounding for the norm).
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kokkos_kernels/adamw.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "kokkos_kernels/reductions.hpp"
#include "src/model/parameter.hpp"
#include "src/parallel/collectives.hpp"
#include "src/train/optimizer.hpp"

namespace tptrain::test {

// Sum of squares of every logical gradient element, counted exactly once: a TP-sharded
// parameter contributes its local part on every rank (summed over the TP group), a replicated
// one (LayerNorm, row-parallel bias, position embedding: identical on every TP rank) only once.
template <class T>
double grad_sum_of_squares(const kx::ExecSpace& exec, const std::vector<model::Parameter<T>*>& params,
                           parallel::Communicator& tp) {
  double sharded = 0.0, replicated = 0.0;
  for (const model::Parameter<T>* p : params) {
    const double s = kernels::squared_norm(exec, p->grad_vector());
    (p->replicated() ? replicated : sharded) += s;
  }
  sharded = parallel::all_reduce_scalar(tp, sharded, parallel::ReduceOp::sum);
  return sharded + replicated;
}

template <class T>
double global_grad_norm(const kx::ExecSpace& exec, const std::vector<model::Parameter<T>*>& params,
                        parallel::Communicator& tp) {
  return std::sqrt(grad_sum_of_squares(exec, params, tp));
}

// The same over a pipeline: `params` are the parameters this stage owns logically (the tied
// copy of the word embedding on the last stage left out: the first stage counts it); each
// stage's sum of squares is formed as above, then summed over the PP group. Data-parallel
// replicas hold identical (all-reduced) gradients and are counted once, by not reducing over
// DP. Every rank of the world gets the same value, bit for bit.
template <class T>
double global_grad_norm(const kx::ExecSpace& exec, const std::vector<model::Parameter<T>*>& params,
                        parallel::Communicator& tp, parallel::Communicator& pp) {
  return std::sqrt(parallel::all_reduce_scalar(pp, grad_sum_of_squares(exec, params, tp), parallel::ReduceOp::sum));
}

template <class T>
void scale_gradients(const kx::ExecSpace& exec, const std::vector<model::Parameter<T>*>& params,
                     kx::acc_t<T> factor) {
  for (model::Parameter<T>* p : params) kernels::scale(exec, p->grad_vector(), factor);
}

// One AdamW step (step: 1-based, for bias correction). Weight decay only where the parameter
// asks for it (2-D weights), never on biases and LayerNorm. Needs each parameter's whole
// optimizer state, which a model with a distributed optimizer does not hold (its buckets do).
template <class T>
void adamw_step(const kx::ExecSpace& exec, const std::vector<model::Parameter<T>*>& params,
                const train::AdamWConfig& c, double lr, std::int64_t step) {
  using Acc = kx::acc_t<T>;
  for (model::Parameter<T>* p : params) {
    if (static_cast<std::int64_t>(p->exp_avg.extent(0)) != p->local_size() ||
        static_cast<std::int64_t>(p->master.extent(0)) != p->local_size())
      throw std::logic_error("tptrain: adamw_step: " + p->name +
                             " has no whole optimizer state (a distributed optimizer keeps a shard of it in its "
                             "bucket): use BucketOptimizer");
    kernels::adamw_update(exec, p->master_vector(), p->grad_vector(),
                          kernels::VectorUnmanaged<Acc>(p->exp_avg.data(), p->local_size()),
                          kernels::VectorUnmanaged<Acc>(p->exp_avg_sq.data(), p->local_size()), lr,
                          c.beta1, c.beta2, c.eps, p->weight_decay ? c.weight_decay : 0.0, step);
    if constexpr (model::Parameter<T>::has_master_copy) kernels::convert(exec, p->master_vector(), p->value_vector());
  }
}

}  // namespace tptrain::test
