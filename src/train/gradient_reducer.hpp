// Data-parallel gradient averaging in buckets (GptModel::buckets(): one per block, head,
// embedding): launch(b) starts a non-blocking all-reduce (sum) of bucket b's flat gradient
// buffer over the DP group as soon as it is final; finish() completes them before the norm.
// On NCCL each all-reduce runs on the DP communicator's own stream, ordered after the kernels
// that finished the bucket, while the backward of the next buckets goes on on the compute
// stream; finish() makes the compute stream wait for them (no host wait). On MPI the host
// starts the request and advances it between buckets (progress). Times how long the step
// spends on the reduction after the backward (the part not hidden behind it; on NCCL only the
// host's share, since the waiting moves to the device).
//
// With a distributed optimizer (the model's OptimizerSharding) each bucket is reduce-scattered
// in place instead: only this rank's shard of the flat buffer ends with the sum over DP (the rest
// is left unspecified), the same overlap. One exception: on the first and the last stage of a
// pipeline the bucket that holds a copy of the tied word embedding is still all-reduced. The
// caller then sums the two copies' gradients over the embedding group (whole, as without the
// option); after a reduce-scatter the two stages would hold different elements of it (the copy
// sits at other offsets of other buckets there). This way the sum is also the plain one, in the
// same order, so both copies stay identical bit for bit.
//
// Sharded gradients (optimizer.shard = "gradients", ZeRO-2; GradBucket::pooled): a pooled bucket
// has no gradient buffer of its own. begin(b) hands it a slot of the model's gradient pool before
// the backward writes it; reduce_scatter(b) starts the reduce-scatter of every micro-batch's part as
// soon as it is written, and the slot is taken back when another bucket needs it or in finish():
// its reduce-scatter waited for (on NCCL by the compute stream, not the host), the rank's shard
// added to the bucket's grad_shard. So a step holds the gradient shards plus the pool's few whole
// buckets, and sends each pooled bucket once per micro-batch instead of once per step. Buckets
// that keep their whole gradient are reduced once per step as above.
//
// A mixture of experts' buckets (GradBucket::expert) hold gradients of the experts this rank
// holds, which only the ranks of its expert-data group share (Topology::expert_dp: data / ep x
// context): they are reduced, and reduce-scattered when their bucket is sharded, over that group.
//
// Hybrid sharding (parallel.shard_group; Topology::shard, replica): a dense bucket's shards spread
// over the shard group only, so its reduce-scatters run over that group, and finish() then sums
// each rank's shard over the replica group, the ranks holding the same shard: once per step (with
// sharded gradients, the sum of the micro-batches' shards). Whole buckets are all-reduced over the
// whole data x context group as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/model/gpt_model.hpp"
#include "src/parallel/communicator.hpp"

namespace tptrain::train {

template <class T>
class GradientReducer {
 public:
  // The Kokkos regions around each reduction start (what Kokkos Tools see).
  static constexpr const char* launch_region_name = "tptrain::dp_all_reduce_start";
  static constexpr const char* reduce_scatter_region_name = "tptrain::dp_reduce_scatter_start";

  // `dp`: the data x context group; `expert_dp`: the expert-data group, needed when the model has
  // expert buckets; `shard` (default dp) and `replica` (none by default): hybrid sharding's groups.
  GradientReducer(model::GptModel<T>& model, parallel::Communicator& dp, parallel::Communicator* expert_dp = nullptr,
                  parallel::Communicator* shard = nullptr, parallel::Communicator* replica = nullptr);
  void launch(const kx::ExecSpace& exec, std::size_t bucket);
  void progress();  // let MPI advance the pending reductions
  // Sharded gradients: a pool slot for pooled bucket `bucket`, zeroed (nothing for another).
  void begin(const kx::ExecSpace& exec, std::size_t bucket);
  // Sharded gradients: starts the reduce-scatter of pooled bucket `bucket`'s micro-batch part
  // (nothing for another); `overlap` false waits for it at once.
  void reduce_scatter(const kx::ExecSpace& exec, std::size_t bucket, bool overlap);
  // After the backward: launches every bucket not launched yet, waits for all of them.
  void finish(const kx::ExecSpace& exec);

  struct Stats {
    std::int64_t steps = 0, messages = 0;  // totals over all steps
    std::size_t bytes = 0;
    double wait_s = 0;                      // time in finish(): the reduction not hidden by the backward
    double slot_wait_s = 0;                 // time begin() waited for a pool slot's reduce-scatter
    std::vector<double> wait_by_bucket_s;   // the waiting part of it by bucket (waited in launch order)
  };
  const Stats& stats() const { return stats_; }

 private:
  model::GptModel<T>& model_;
  parallel::Communicator& dp_;
  parallel::Communicator* expert_dp_;
  parallel::Communicator& shard_;
  parallel::Communicator* replica_;
  std::size_t tied_bucket_ = SIZE_MAX;  // the bucket holding a tied word embedding copy (pipeline > 1)
  std::vector<parallel::Request> pending_;
  std::vector<std::size_t> pending_bucket_;
  std::vector<bool> launched_;
  // Sharded gradients: the pool slots' buckets (-1: free), and the reduce-scatters in flight, oldest first.
  struct InFlight {
    parallel::Request request;
    int slot;
  };
  std::vector<long> slot_bucket_;  // by slot
  std::vector<int> written_slot_;  // by bucket: the slot its backward writes now (-1: none)
  std::vector<InFlight> scattering_;
  parallel::Communicator& group_of(std::size_t bucket);          // of an all-reduce
  parallel::Communicator& shard_group_of(std::size_t bucket);    // of a reduce-scatter
  void sum_over_replicas(const kx::ExecSpace& exec);
  void take_back_oldest(const kx::ExecSpace& exec);  // waits for it, adds its shard
  Stats stats_;
};

}  // namespace tptrain::train
