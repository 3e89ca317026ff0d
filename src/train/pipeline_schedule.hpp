// Pipeline schedules (which stage runs which micro-batch when, and what it sends where) and
// their execution, plus the bucketed, overlapped data-parallel gradient reduction.
//
// Schedules (Megatron-LM schedules.py, forward_backward_pipelining_without_interleaving):
//   1F1B: stage p of P runs w = min(P - p - 1, M) warm-up forwards, then alternates one forward
//         and one backward M - w times, then runs the w remaining backwards. At most P - p
//         micro-batches are between their forward and their backward on stage p.
//   all-forward-all-backward (GPipe): M forwards, then M backwards; M micro-batches in flight.
// Both run the backwards in micro-batch order 0..M-1 on every stage, so the gradients (which
// accumulate in that order) are bitwise the same under both.
//
// Communication ops post all their transfers (isend/irecv on the PP group, peers p +- 1, tag
// 2m for activations and 2m+1 for gradients of micro-batch m) and then wait for all of them,
// as Megatron's send_forward_recv_backward etc.: no transfer is pending outside an op, so
// buffers are free again after it. An op talks to one neighbour only, and the two stages of a
// pair post their halves in matching order (transfers_of), so the schedule cannot deadlock even
// if each transfer were a blocking rendezvous (simulate_pipeline checks that).
//
// Activation memory: each micro-batch between its forward and its backward keeps its own
// activation slot in the model (GptModel::bind_slot): a stage reserves as many slots as its
// schedule has micro-batches in flight, and what a slot holds is the choice of
// training.recompute (src/model/recompute.hpp). A received stage input goes straight into its
// micro-batch's slot.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/parallel/collectives.hpp"
#include "src/train/device_batch.hpp"
#include "src/model/gpt_model.hpp"

namespace tptrain::train {

enum class Schedule { one_f_one_b, all_forward_all_backward };
const char* schedule_name(Schedule s);

// One step of a stage's schedule.
struct PipelineOp {
  enum Kind { forward, backward, communicate };
  Kind kind = forward;
  int micro_batch = -1;  // forward / backward
  // communicate: the micro-batches of up to two transfers (-1: none)
  int recv_forward = -1;   // input of micro-batch m, from stage - 1
  int send_forward = -1;   // output of micro-batch m, to stage + 1
  int recv_backward = -1;  // dL/d(output) of micro-batch m, from stage + 1
  int send_backward = -1;  // dL/d(input) of micro-batch m, to stage - 1
};

// One transfer of a communicate op, in the order the op posts them (transfers_of).
struct PipelineTransfer {
  int peer = 0;        // +1: the next stage, -1: the previous one
  bool send = false;
  int direction = 0;   // 0: activation (forward), 1: gradient (backward)
  int micro_batch = -1;
};
std::vector<PipelineTransfer> transfers_of(const PipelineOp& op);

// The ops of stage `stage` of `stages` for `micro_batches` micro-batches (pure; no MPI).
std::vector<PipelineOp> pipeline_ops(Schedule schedule, int stage, int stages, int micro_batches);

// Most micro-batches between their forward and their backward at once on a stage.
int peak_in_flight(const std::vector<PipelineOp>& ops);

// Runs every stage's ops with strict rendezvous semantics (each transfer, in transfers_of
// order, completes only when the peer stands at the matching transfer: stricter than MPI, as
// NCCL point-to-point on one stream) and returns "" if all finish, else a description of the
// deadlock or inconsistency. For tests.
std::string simulate_pipeline(Schedule schedule, int stages, int micro_batches);

struct PipelineStats {
  double p2p_wait_s = 0;       // time in communication ops (includes the pipeline bubble)
};

// Executes a schedule on one stage (T: the model's storage type; stage tensors travel in it).
template <class T>
class PipelineRunner {
 public:
  PipelineRunner(model::GptModel<T>& model, parallel::Communicator& pp, Schedule schedule);

  // Forward and backward of micro-batches 0..M-1 with loss scale `scale`. `batch(m)` returns the
  // tokens/targets of micro-batch m (asked for on the first and last stage only; it may return
  // the same object each time, refilled). `bucket_done(m, b)` is called when gradient bucket b
  // (Model::buckets()) has micro-batch m's contribution. Returns the sum of the token losses
  // (last stage; 0 elsewhere).
  double run(const kx::ExecSpace& exec, int micro_batches, float scale,
             const std::function<const DeviceBatch&(int)>& batch,
             const std::function<void(int, std::size_t)>& bucket_done);

  // Allocates the activation slots `micro_batches` per step need under the schedule (run() does
  // it too; call it first to have the memory allocated before the first step).
  void reserve(int micro_batches);

  Schedule schedule() const { return schedule_; }
  void set_schedule(Schedule s) { schedule_ = s; }
  const PipelineStats& stats() const { return stats_; }

 private:
  int acquire_slot(int m);

  model::GptModel<T>& model_;
  parallel::Communicator& pp_;
  Schedule schedule_;
  std::vector<int> free_;                      // free activation slots
  std::vector<int> slot_of_;                   // micro-batch -> activation slot
  Kokkos::View<double, kx::MemSpace> loss_total_{"pipeline.loss_total"};  // summed on the device
  kernels::Tokens no_tokens_;                  // middle stages use no tokens
  PipelineStats stats_;
};

// Data-parallel gradient averaging in buckets (Model::buckets(): one per block, head,
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
template <class T>
class GradientReducer {
 public:
  // The Kokkos regions around each reduction start (what Kokkos Tools see).
  static constexpr const char* launch_region_name = "tptrain::dp_all_reduce_start";
  static constexpr const char* reduce_scatter_region_name = "tptrain::dp_reduce_scatter_start";

  GradientReducer(model::GptModel<T>& model, parallel::Communicator& dp);
  void launch(const kx::ExecSpace& exec, std::size_t bucket);
  void progress();  // let MPI advance the pending reductions
  // After the backward: launches every bucket not launched yet, waits for all of them.
  void finish(const kx::ExecSpace& exec);

  struct Stats {
    std::int64_t steps = 0, messages = 0;  // totals over all steps
    std::size_t bytes = 0;
    double wait_s = 0;                      // time in finish(): the reduction not hidden by the backward
    std::vector<double> wait_by_bucket_s;   // the waiting part of it by bucket (waited in launch order)
  };
  const Stats& stats() const { return stats_; }

 private:
  model::GptModel<T>& model_;
  parallel::Communicator& dp_;
  std::size_t tied_bucket_ = SIZE_MAX;  // the bucket holding a tied word embedding copy (pipeline > 1)
  std::vector<parallel::Request> pending_;
  std::vector<std::size_t> pending_bucket_;
  std::vector<bool> launched_;
  Stats stats_;
};

}  // namespace tptrain::train
