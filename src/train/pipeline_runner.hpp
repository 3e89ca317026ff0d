// Executes a pipeline schedule (pipeline_schedule.hpp) on one stage: the model's forwards and
// backwards of the micro-batches, and the point-to-point transfers between neighbouring stages
// (isend/irecv on the PP group, peers p +- 1, tag 2m for activations and 2m+1 for gradients of
// micro-batch m), each communication op one group (on NCCL, one ncclGroupStart/End).
//
// Activation memory: each micro-batch between its forward and its backward keeps its own
// activation slot in the model (GptModel::bind_slot): a stage reserves as many slots as its
// schedule has micro-batches in flight, and what a slot holds is the choice of
// training.recompute (src/model/recompute.hpp). A received stage input goes straight into its
// micro-batch's slot.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "src/model/gpt_model.hpp"
#include "src/parallel/communicator.hpp"
#include "src/train/device_batch.hpp"
#include "src/train/pipeline_schedule.hpp"

namespace tptrain::train {

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
  // (GptModel::buckets()) has micro-batch m's contribution. Returns the sum of the token losses
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

}  // namespace tptrain::train
