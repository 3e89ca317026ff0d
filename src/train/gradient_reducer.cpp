#include "src/train/gradient_reducer.hpp"

#include <algorithm>
#include <chrono>

#include "kokkos_kernels/elementwise.hpp"

#include "src/parallel/collectives.hpp"

namespace tptrain::train {

template <class T>
GradientReducer<T>::GradientReducer(model::GptModel<T>& model, parallel::Communicator& dp,
                                    parallel::Communicator* expert_dp, parallel::Communicator* shard,
                                    parallel::Communicator* replica)
    : model_(model), dp_(dp), expert_dp_(expert_dp), shard_(shard != nullptr ? *shard : dp),
      replica_(replica != nullptr && replica->size() > 1 ? replica : nullptr),
      slot_bucket_(std::size_t(model.gradient_slots()), -1),
      written_slot_(model.buckets().size(), -1) {
  if (model.has_expert_buckets() && expert_dp == nullptr)
    throw std::logic_error("tptrain: GradientReducer: a mixture of experts needs the expert-data group");
  if (model.word() == nullptr || !model.shares_word_embedding()) return;
  const auto& buckets = model.buckets();
  for (std::size_t b = 0; b < buckets.size(); ++b)
    for (const model::Parameter<T>* p : buckets[b].params)
      if (p == model.word()) tied_bucket_ = b;
}

template <class T>
parallel::Communicator& GradientReducer<T>::group_of(std::size_t bucket) {
  return model_.buckets()[bucket].expert ? *expert_dp_ : dp_;
}

template <class T>
parallel::Communicator& GradientReducer<T>::shard_group_of(std::size_t bucket) {
  return model_.buckets()[bucket].expert ? *expert_dp_ : shard_;
}

// Hybrid sharding: each dense sharded bucket's shard, summed over the ranks that hold the same
// shard (whole buckets were all-reduced over the whole group already).
template <class T>
void GradientReducer<T>::sum_over_replicas(const kx::ExecSpace& exec) {
  if (replica_ == nullptr) return;
  std::vector<parallel::Request> sums;
  auto& buckets = model_.buckets();
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const model::GradBucket<T>& bucket = buckets[b];
    if (bucket.expert || !bucket.sharded() || b == tied_bucket_) continue;
    sums.push_back(parallel::iall_reduce(*replica_, exec, bucket.shard_grads(), parallel::ReduceOp::sum));
    ++stats_.messages;
    stats_.bytes += std::size_t(bucket.shard_end - bucket.shard_begin) * sizeof(kx::acc_t<T>);
  }
  parallel::wait_all_on(sums.data(), sums.size(), exec);
}

template <class T>
void GradientReducer<T>::launch(const kx::ExecSpace& exec, std::size_t bucket) {
  auto& buckets = model_.buckets();
  if (launched_.size() != buckets.size()) launched_.assign(buckets.size(), false);
  if (launched_[bucket]) return;
  launched_[bucket] = true;
  if (buckets[bucket].pooled) return;  // reduce_scatter, per micro-batch
  const bool scatter = buckets[bucket].sharded() && bucket != tied_bucket_;
  parallel::Communicator& group = scatter ? shard_group_of(bucket) : group_of(bucket);
  if (group.size() == 1) return;
  // A named Kokkos region marks the start for profilers (and for the test that the reduction
  // starts before the backward of the next bucket runs).
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
void GradientReducer<T>::begin(const kx::ExecSpace& exec, std::size_t bucket) {
  if (!model_.buckets()[bucket].pooled) return;
  auto free = std::find(slot_bucket_.begin(), slot_bucket_.end(), -1);
  if (free == slot_bucket_.end()) {
    if (scattering_.empty())
      throw std::logic_error("tptrain: GradientReducer: every gradient pool slot is written at once");
    const auto t0 = std::chrono::steady_clock::now();
    take_back_oldest(exec);
    stats_.slot_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    free = std::find(slot_bucket_.begin(), slot_bucket_.end(), -1);
  }
  *free = static_cast<long>(bucket);
  const int slot = static_cast<int>(free - slot_bucket_.begin());
  written_slot_[bucket] = slot;
  model_.bind_gradient_slot(exec, bucket, slot);
}

template <class T>
void GradientReducer<T>::reduce_scatter(const kx::ExecSpace& exec, std::size_t bucket, bool overlap) {
  const model::GradBucket<T>& b = model_.buckets()[bucket];
  if (!b.pooled) return;
  const int slot = written_slot_[bucket];
  if (slot < 0) throw std::logic_error("tptrain: GradientReducer: bucket " + b.name + " was written without a pool slot");
  written_slot_[bucket] = -1;
  Kokkos::Profiling::pushRegion(reduce_scatter_region_name);
  scattering_.push_back(
      {parallel::ireduce_scatter_in_place(shard_group_of(bucket), exec, b.grads, parallel::ReduceOp::sum), slot});
  Kokkos::Profiling::popRegion();
  ++stats_.messages;
  stats_.bytes += b.grads.span() * sizeof(kx::acc_t<T>);
  if (!overlap) take_back_oldest(exec);
  progress();
}

template <class T>
void GradientReducer<T>::take_back_oldest(const kx::ExecSpace& exec) {
  InFlight& oldest = scattering_.front();
  long& owner = slot_bucket_[static_cast<std::size_t>(oldest.slot)];
  const model::GradBucket<T>& b = model_.buckets()[static_cast<std::size_t>(owner)];
  oldest.request.wait_on(exec);  // NCCL: the adding kernel waits, not the host
  // The slot's shard, not b.grads: the bucket's next micro-batch may be written elsewhere already.
  kernels::add_inplace(exec, b.grad_shard,
                       Kokkos::subview(model_.gradient_slot(oldest.slot), std::make_pair(b.shard_begin, b.shard_end)));
  owner = -1;
  scattering_.erase(scattering_.begin());
}

template <class T>
void GradientReducer<T>::progress() {
  if (pending_.empty() && scattering_.empty()) return;
  parallel::progress(dp_);
  if (&shard_ != &dp_) parallel::progress(shard_);
  if (expert_dp_ != nullptr) parallel::progress(*expert_dp_);
}

template <class T>
void GradientReducer<T>::finish(const kx::ExecSpace& exec) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  while (!scattering_.empty()) take_back_oldest(exec);
  for (std::size_t b = 0; b < model_.buckets().size(); ++b) launch(exec, b);
  stats_.wait_by_bucket_s.resize(model_.buckets().size(), 0.0);
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    const auto t0 = clock::now();
    pending_[i].wait_on(exec);  // NCCL: the optimizer's kernels wait, not the host
    stats_.wait_by_bucket_s[pending_bucket_[i]] += std::chrono::duration<double>(clock::now() - t0).count();
  }
  sum_over_replicas(exec);
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
