// AdamW (Loshchilov & Hutter, decoupled weight decay) over the model's parameters, and the
// global gradient norm used for clipping.
#pragma once

#include <cmath>
#include <vector>

#include "kokkos_kernels/adamw.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "kokkos_kernels/reductions.hpp"
#include "src/model/parameter.hpp"
#include "src/parallel/collectives.hpp"

namespace tptrain::train {

// The deck's [optimizer] values; their defaults live in the deck's key table (io/deck_keys.cpp).
struct AdamWConfig {
  double beta1{}, beta2{}, eps{}, weight_decay{};
};

// Sum of squares of every logical gradient element, counted exactly once: a TP-sharded
// parameter contributes its local part on every rank (summed over the TP group), a replicated
// one (LayerNorm, row-parallel bias, position embedding: identical on every TP rank) only once.
template <class T>
double grad_sum_of_squares(const kx::ExecSpace& exec, const std::vector<model::Parameter<T>*>& params,
                           parallel::Communicator& tp) {
  double sharded = 0.0, replicated = 0.0;
  for (const model::Parameter<T>* p : params) {
    const double s = kernels::squared_norm(exec, p->dv());
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
void scale_gradients(const kx::ExecSpace& exec, const std::vector<model::Parameter<T>*>& params, T factor) {
  for (model::Parameter<T>* p : params) kernels::scale(exec, p->dv(), factor);
}

// One AdamW step (step: 1-based, for bias correction). Weight decay only where the parameter
// asks for it (2-D weights), never on biases and LayerNorm.
template <class T>
void adamw_step(const kx::ExecSpace& exec, const std::vector<model::Parameter<T>*>& params,
                const AdamWConfig& c, double lr, std::int64_t step) {
  for (model::Parameter<T>* p : params) {
    kernels::adamw_update(exec, p->v(), p->dv(),
                          kernels::VectorUnmanaged<T>(p->exp_avg.data(), p->local_size()),
                          kernels::VectorUnmanaged<T>(p->exp_avg_sq.data(), p->local_size()), lr,
                          c.beta1, c.beta2, c.eps, p->weight_decay ? c.weight_decay : 0.0, step);
  }
}

}  // namespace tptrain::train
