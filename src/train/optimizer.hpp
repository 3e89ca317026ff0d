// AdamW (Loshchilov & Hutter, decoupled weight decay) over the model's parameters, and the
// global gradient norm used for clipping. The training step runs BucketOptimizer: one norm
// kernel and one AdamW kernel (with the clipping factor folded in) per flat parameter bucket.
// The per-parameter reference it is tested against is tests/train/per_parameter_optimizer.hpp.
// Mixed precision: AdamW updates the fp32 master weights with fp32 moments and gradients, then
// the compute copy is rounded from the master (round to nearest even; no stochastic rounding:
// with an fp32 master the rounding error never accumulates in the weights, so the unbiasedness
// stochastic rounding buys is not needed, and results stay bitwise reproducible).
#pragma once

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kokkos_kernels/adamw.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "kokkos_kernels/reductions.hpp"
#include "kokkos_kernels/flat_segments.hpp"
#include "src/model/gpt_model.hpp"
#include "src/model/parameter.hpp"
#include "src/parallel/collectives.hpp"
#include "src/util/host_waits.hpp"

namespace tptrain::train {

// The deck's [optimizer] values; their defaults live in the deck's key table (io/deck_keys.cpp).
struct AdamWConfig {
  double beta1{}, beta2{}, eps{}, weight_decay{};
};

// Every compute copy from the fp32 master weights (after a checkpoint set them): rounded (bf16,
// fp16), and with a distributed optimizer, whose ranks hold one shard of the masters each,
// all-gathered over their shard group `dp` (Topology::shard: data x context, or parallel.shard_group
// of its ranks) as at the end of a step (with sharded parameters
// a gathered bucket keeps its shard: its module gathers it when it computes); and the routers' fp32
// expert biases from theirs.
// `expert_dp`: the expert-data group, over which the expert buckets are sharded (model.mlp = moe).
template <class T>
void values_from_master(const kx::ExecSpace& exec, model::GptModel<T>& model, parallel::Communicator& dp,
                        parallel::Communicator* expert_dp = nullptr) {
  model.round_compute_copy(exec);
  model.release_gathered_weights(exec);
  for (auto& bucket : model.buckets())
    if (bucket.sharded() && !bucket.gathered)
      parallel::iall_gather_in_place(bucket.expert ? *expert_dp : dp, exec, bucket.values).wait_on(exec);
  model.expert_biases_from_master(exec, dp);  // the routers' fp32 biases (model.mlp = moe)
}

// The optimizer step over a model stage's buckets (model::GradBucket: values, gradients and
// moments of its parameters in four flat buffers at the same offsets). Each bucket's segment
// table says per parameter whether it is decayed, replicated over the TP group (its square
// counted once, not summed over the group) and counted in the norm at all (not the last
// stage's tied copy of the word embedding: the first stage counts it).
//
// With a distributed optimizer (the model's OptimizerSharding, over the DP group `dp`) every
// kernel runs on this rank's shard of each bucket, whose gradients the reduce-scatter left
// final, and the table is cut to the shard (segments_in_range; the bucket's zero padding is a
// segment of its own, neither decayed nor counted). The norm's sums then also add over DP (each
// rank holds a different part), and after AdamW the updated values are all-gathered over DP.
template <class T>
class BucketOptimizer {
 public:
  // `dp`: the shard group (Topology::shard: data x context, or parallel.shard_group of its ranks);
  // needed (rank and size those of the model's sharding) when the model has a distributed optimizer.
  // A mixture of experts (model.mlp = moe): `ep`, the expert-parallel group, whose ranks hold
  // different experts (their squares add over it), and `expert_dp`, the expert-data group, over
  // which the expert buckets are sharded.
  explicit BucketOptimizer(model::GptModel<T>& model, parallel::Communicator* dp = nullptr,
                           parallel::Communicator* ep = nullptr, parallel::Communicator* expert_dp = nullptr)
      : model_(model), dp_(dp), ep_(ep), expert_dp_(expert_dp),
        sums_("tptrain::BucketOptimizer::sums", model.buckets().size(), 2),
        host_sums_(Kokkos::create_mirror_view(sums_)) {
    const model::OptimizerSharding& shards = model.optimizer_sharding();
    if (shards.distributed() && (dp == nullptr || dp->size() != shards.size || dp->rank() != shards.rank))
      throw std::logic_error("tptrain: BucketOptimizer: the model's optimizer shards are not the ranks of the "
                             "data-parallel group it was given");
    const model::OptimizerSharding& expert_shards = model.expert_optimizer_sharding();
    if (model.has_expert_buckets() &&
        (ep == nullptr || expert_dp == nullptr ||
         (expert_shards.distributed() && (expert_dp->size() != expert_shards.size || expert_dp->rank() != expert_shards.rank))))
      throw std::logic_error("tptrain: BucketOptimizer: a mixture of experts needs its expert group and the "
                             "expert-data group of its optimizer shards");
    for (const auto& bucket : model.buckets()) {
      std::vector<kernels::FlatSegment> table;
      for (std::size_t i = 0; i < bucket.params.size(); ++i) {
        const model::Parameter<T>* p = bucket.params[i];
        table.push_back({bucket.offsets[i], bucket.offsets[i] + p->local_size(), p->weight_decay, p->replicated(),
                         !model.is_tied_copy(p)});
      }
      if (bucket.sharded()) {
        table.push_back({bucket.used, bucket.padded, false, false, false});  // padding
        table = kernels::segments_in_range(table, bucket.shard_begin, bucket.shard_end);
      }
      segments_.emplace_back(std::move(table));
    }
  }

  // The global gradient norm (before clipping), the same on every rank of the world bit for
  // bit: per bucket {sharded, replicated} squares on the device, copied to the host once, the
  // sharded sum reduced over TP, the stage's total over PP. DP replicas hold the same gradients
  // and are not added; with a distributed optimizer each DP rank holds its own shard and both
  // sums are added over DP first. Expert buckets: their sums over the expert-data group when
  // sharded, then over the expert group (each of its ranks holds other experts).
  double grad_norm(const kx::ExecSpace& exec, parallel::Communicator& tp, parallel::Communicator& pp) {
    auto& buckets = model_.buckets();
    for (std::size_t b = 0; b < buckets.size(); ++b)
      kernels::bucket_squared_norms(exec, buckets[b].shard_grads(), segments_[b],
                                    Kokkos::subview(sums_, b, Kokkos::ALL()));
    util::note_host_wait(util::HostWait::norm_to_host);  // the one copy of the norm's sums in a step
    Kokkos::deep_copy(exec, host_sums_, sums_);
    exec.fence();
    double sharded = 0.0, replicated = 0.0, experts = 0.0;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      if (buckets[b].expert) {
        experts += host_sums_(b, 0) + host_sums_(b, 1);  // tensor-split: no replicated expert parameter
        continue;
      }
      sharded += host_sums_(b, 0);
      replicated += host_sums_(b, 1);
    }
    if (model_.optimizer_sharding().distributed()) {
      sharded = parallel::all_reduce_scalar(*dp_, sharded, parallel::ReduceOp::sum);
      replicated = parallel::all_reduce_scalar(*dp_, replicated, parallel::ReduceOp::sum);
    }
    if (model_.has_expert_buckets()) {
      if (model_.expert_optimizer_sharding().distributed())
        experts = parallel::all_reduce_scalar(*expert_dp_, experts, parallel::ReduceOp::sum);
      sharded += parallel::all_reduce_scalar(*ep_, experts, parallel::ReduceOp::sum);
    }
    sharded = parallel::all_reduce_scalar(tp, sharded, parallel::ReduceOp::sum);
    return std::sqrt(parallel::all_reduce_scalar(pp, sharded + replicated, parallel::ReduceOp::sum));
  }

  // AdamW on every bucket's master weights with the gradients scaled by `grad_scale` (the
  // clipping factor, and 1/loss scale with fp16; the gradient buffers themselves are left as they
  // are), then the compute copy rounded from the master. step: 1-based. With a distributed
  // optimizer each bucket's values are all-gathered over DP as soon as its shard is updated
  // (on NCCL on the DP stream, behind the next buckets' AdamW); work queued on `exec` after
  // this call sees every parameter's new values. With sharded parameters a gathered bucket's
  // updated shard stays where it is, and every gathered copy is freed.
  void step(const kx::ExecSpace& exec, const AdamWConfig& c, double lr, std::int64_t step, float grad_scale) {
    auto& buckets = model_.buckets();
    std::vector<parallel::Request> gathers;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      auto& bucket = buckets[b];
      kernels::bucket_adamw_update(exec, bucket.master, bucket.shard_grads(), bucket.exp_avg, bucket.exp_avg_sq,
                                   segments_[b], lr, c.beta1, c.beta2, c.eps, c.weight_decay, step,
                                   kx::acc_t<T>(grad_scale));
      if constexpr (model::Parameter<T>::has_master_copy) kernels::convert(exec, bucket.master, bucket.shard_values());
      if (bucket.sharded() && !bucket.gathered)
        gathers.push_back(parallel::iall_gather_in_place(bucket.expert ? *expert_dp_ : *dp_, exec, bucket.values));
    }
    parallel::wait_all_on(gathers.data(), gathers.size(), exec);
    model_.release_gathered_weights(exec);
  }

 private:
  model::GptModel<T>& model_;
  parallel::Communicator* dp_ = nullptr;
  parallel::Communicator* ep_ = nullptr;
  parallel::Communicator* expert_dp_ = nullptr;
  std::vector<kernels::FlatSegments<kx::ExecSpace>> segments_;
  Kokkos::View<double**, Kokkos::LayoutRight, kx::MemSpace> sums_;  // [buckets, 2]
  typename Kokkos::View<double**, Kokkos::LayoutRight, kx::MemSpace>::HostMirror host_sums_;
};

}  // namespace tptrain::train
