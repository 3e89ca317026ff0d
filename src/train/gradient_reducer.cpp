#include "src/train/gradient_reducer.hpp"

#include <chrono>

#include "src/parallel/collectives.hpp"

namespace tptrain::train {

template <class T>
GradientReducer<T>::GradientReducer(model::GptModel<T>& model, parallel::Communicator& dp,
                                    parallel::Communicator* expert_dp)
    : model_(model), dp_(dp), expert_dp_(expert_dp) {
  if (model.has_expert_buckets() && expert_dp == nullptr)
    throw std::logic_error("tptrain: GradientReducer: a mixture of experts needs the expert-data group");
  if (model.word() == nullptr || !model.shares_word_embedding()) return;
  const auto& buckets = model.buckets();
  for (std::size_t b = 0; b < buckets.size(); ++b)
    for (const model::Parameter<T>* p : buckets[b].params)
      if (p == model.word()) tied_bucket_ = b;
}

template <class T>
void GradientReducer<T>::launch(const kx::ExecSpace& exec, std::size_t bucket) {
  auto& buckets = model_.buckets();
  if (launched_.size() != buckets.size()) launched_.assign(buckets.size(), false);
  if (launched_[bucket]) return;
  launched_[bucket] = true;
  parallel::Communicator& group = buckets[bucket].expert ? *expert_dp_ : dp_;
  if (group.size() == 1) return;
  // A named Kokkos region marks the start for profilers (and for the test that the reduction
  // starts before the backward of the next bucket runs).
  const bool scatter = buckets[bucket].sharded() && bucket != tied_bucket_;
  Kokkos::Profiling::pushRegion(scatter ? reduce_scatter_region_name : launch_region_name);
  pending_.push_back(scatter ? parallel::ireduce_scatter_in_place(group, exec, buckets[bucket].grads, parallel::ReduceOp::sum)
                             : parallel::iall_reduce(group, exec, buckets[bucket].grads, parallel::ReduceOp::sum));
  Kokkos::Profiling::popRegion();
  pending_bucket_.push_back(bucket);
  ++stats_.messages;
  stats_.bytes += buckets[bucket].grads.span() * sizeof(kx::acc_t<T>);
  progress();
}


template <class T>
void GradientReducer<T>::progress() {
  if (pending_.empty()) return;
  parallel::progress(dp_);
  if (expert_dp_ != nullptr) parallel::progress(*expert_dp_);
}

template <class T>
void GradientReducer<T>::finish(const kx::ExecSpace& exec) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  for (std::size_t b = 0; b < model_.buckets().size(); ++b) launch(exec, b);
  stats_.wait_by_bucket_s.resize(model_.buckets().size(), 0.0);
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    const auto t0 = clock::now();
    pending_[i].wait_on(exec);  // NCCL: the optimizer's kernels wait, not the host
    stats_.wait_by_bucket_s[pending_bucket_[i]] += std::chrono::duration<double>(clock::now() - t0).count();
  }
  stats_.wait_s += std::chrono::duration<double>(clock::now() - start).count();
  pending_.clear();
  pending_bucket_.clear();
  launched_.assign(model_.buckets().size(), false);
  ++stats_.steps;
}

template class GradientReducer<float>;
template class GradientReducer<kx::bf16>;
template class GradientReducer<kx::fp16>;

}  // namespace tptrain::train
