// Sharded parameters (optimizer.shard = "parameters": ZeRO stage 3, P_os+g+p of Rajbhandari et al. 2020;
// PyTorch FSDP, Zhao et al. 2023): a gathered bucket (GradBucket::gathered) keeps only its rank's
// shard of the compute weights, `value_shard`. Its whole weights exist only while its module (a
// step of the backward: a block, the head, the embedding) computes: all-gathered over the bucket's
// shard group into its fixed place in the arena (gathered_weight_offsets), the bucket's `values`
// and its parameters' `value` views bound there, and unbound again when the module is done. The
// model asks for the next module's gather (start) while the current one computes: on NCCL it runs
// on the group's stream behind the kernels queued before it, and the compute stream, not the host,
// waits for it (Request::wait_on); on MPI the request advances while the host waits for it.
//
// Two modules of adjacent steps sit in different halves of the arena, so a prefetch never writes
// where the computing module reads; start() refuses a bucket whose place overlaps one bound or in
// flight (a prefetch of the wrong module).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/model/parameter.hpp"
#include "src/parallel/collectives.hpp"
#include "src/util/memory_category.hpp"
#include "src/util/phases.hpp"

namespace tptrain::model {

template <class T>
struct GradBucket;

template <class T>
class ParameterGathering {
 public:
  struct Stats {
    std::int64_t gathers = 0;  // all-gathers started (one per bucket and module use)
    std::size_t bytes = 0;     // their gathered bytes (whole buckets)
    double wait_s = 0;         // host time waiting for them (MPI: the exposed part; NCCL: ~0)
  };

  // `offsets`: each bucket's place in the arena (-1: not gathered); `elements`: the arena's length.
  void allocate(const std::vector<std::int64_t>& offsets, std::int64_t elements) {
    offsets_ = offsets;
    state_ = std::vector<State>(offsets.size());
    if (elements == 0) return;
    util::MemoryCategoryScope as(util::MemoryCategory::weights);
    arena_ = kernels::Vector<T>("tptrain::gathered_weights", elements);
  }
  bool active() const { return arena_.size() > 0; }
  std::size_t bytes() const { return arena_.span() * sizeof(T); }
  // The groups the buckets' shards are spread over: data x context, and the expert-data group.
  void bind_groups(parallel::Communicator& dp, parallel::Communicator* expert_dp) {
    dp_ = &dp;
    expert_dp_ = expert_dp;
  }

  // Starts the all-gather of each of `module`'s gathered buckets not bound or in flight.
  void start(const kx::ExecSpace& exec, std::vector<GradBucket<T>>& buckets, const std::vector<std::size_t>& module) {
    for (const std::size_t b : module) {
      GradBucket<T>& bucket = buckets[b];
      State& s = state_[b];
      if (!bucket.gathered || s.bound || s.in_flight) continue;
      refuse_overlap(buckets, b);
      parallel::Communicator* group = bucket.expert ? expert_dp_ : dp_;
      if (group == nullptr || group->size() != bucket.shards)
        throw std::logic_error("tptrain: the gathered weights of " + bucket.name + " need their shard group of " +
                               std::to_string(bucket.shards) + " ranks (GptModel::bind_shard_groups)");
      s.request = parallel::iall_gather(*group, exec, bucket.value_shard, place(b, bucket));
      s.in_flight = true;
      ++stats_.gathers;
      stats_.bytes += std::size_t(bucket.padded) * sizeof(T);
      parallel::progress(*group);
    }
  }
  // `module`'s gathered buckets whole and bound: their gathers started if the prefetch did not,
  // then waited for.
  void wait(const kx::ExecSpace& exec, std::vector<GradBucket<T>>& buckets, const std::vector<std::size_t>& module) {
    start(exec, buckets, module);
    std::optional<util::PhaseScope> phase;
    for (const std::size_t b : module)
      if (state_[b].in_flight && !phase) phase.emplace(util::Phase::dp_gather);  // what the module before did not hide
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::size_t b : module) {
      State& s = state_[b];
      if (!s.in_flight) continue;
      s.request.wait_on(exec);
      s.in_flight = false;
      bind(buckets[b], place(b, buckets[b]));
      s.bound = true;
    }
    stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Frees `module`'s gathered weights: their views unbound, their places free for another module.
  void release(std::vector<GradBucket<T>>& buckets, const std::vector<std::size_t>& module) {
    for (const std::size_t b : module)
      if (state_[b].bound) {
        bind(buckets[b], {});
        state_[b].bound = false;
      }
  }
  // Every bucket's (after the shards changed: an optimizer step, a checkpoint load).
  void release_all(const kx::ExecSpace& exec, std::vector<GradBucket<T>>& buckets) {
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      if (state_[b].in_flight) {
        state_[b].request.wait_on(exec);
        state_[b].in_flight = false;
      }
      if (state_[b].bound) {
        bind(buckets[b], {});
        state_[b].bound = false;
      }
    }
  }
  const Stats& stats() const { return stats_; }

 private:
  struct State {
    bool bound = false, in_flight = false;
    parallel::Request request;
  };
  kernels::Vector<T> place(std::size_t b, const GradBucket<T>& bucket) const {
    return Kokkos::subview(arena_, std::make_pair(offsets_[b], offsets_[b] + bucket.padded));
  }
  // The bucket's and its parameters' value views on `whole` (empty: unbound).
  static void bind(GradBucket<T>& bucket, const kernels::Vector<T>& whole) {
    bucket.values = whole;
    for (std::size_t i = 0; i < bucket.params.size(); ++i)
      bucket.params[i]->value =
          whole.size() > 0
              ? kernels::Vector<T>(Kokkos::subview(
                    whole, std::make_pair(bucket.offsets[i], bucket.offsets[i] + bucket.params[i]->local_size())))
              : kernels::Vector<T>();
  }
  void refuse_overlap(const std::vector<GradBucket<T>>& buckets, std::size_t b) const {
    const std::int64_t begin = offsets_[b], end = begin + buckets[b].padded;
    for (std::size_t o = 0; o < buckets.size(); ++o)
      if (o != b && (state_[o].bound || state_[o].in_flight) && offsets_[o] < end &&
          begin < offsets_[o] + buckets[o].padded)
        throw std::logic_error("tptrain: the gather of " + buckets[b].name + "'s weights would overwrite " +
                               buckets[o].name + "'s, which are " + (state_[o].bound ? "in use" : "being gathered"));
  }

  kernels::Vector<T> arena_;
  std::vector<std::int64_t> offsets_;
  std::vector<State> state_;
  parallel::Communicator* dp_ = nullptr;
  parallel::Communicator* expert_dp_ = nullptr;
  Stats stats_;
};

}  // namespace tptrain::model
