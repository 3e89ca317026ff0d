// Executes a pipeline schedule (pipeline_schedule.hpp) on one stage: the model's forwards and
// backwards of the micro-batches of its chunks, and the point-to-point transfers between
// neighbouring ranks (isend/irecv on the PP group, peers r ± 1 mod p, tags transfer_tag), each
// posted group one operation (on NCCL, one ncclGroupStart/End).
//
// Overlap: a group is posted where the schedule puts it and completed (wait_all_on) only at the
// schedule's `wait`, just before the first op that needs it (src/schedule/overlap.hpp, overlapped):
//   - a received activation: before the forward of its micro-batch and chunk;
//   - a received gradient: before the backward of its micro-batch and chunk;
//   - a sent input gradient: before the next backward (which overwrites the model's gradient
//     buffer), and with v = 1 before a later receive of a gradient into that buffer;
//   - a sent stage output: before the backward of its micro-batch (its slot is reused after).
// On MPI the host waits there; on NCCL the wait is stream-ordered: the kernels queued after it
// wait for the communication stream, the host does not. Everything between the post and the
// wait (the current forward or backward) runs while the transfer is in flight.
//
// Where a receive is posted follows the PP backend (Matching, pipeline_schedule.hpp): on MPI
// (requests matched by tag) and on NCCL with a lane per flow (per_flow: each transfer one NCCL
// call on its flow's communicator and stream, pipeline_lane; the lanes are opened and connected
// when the runner is built, collectively) one compute earlier, as its own group, wherever that
// needs no more activation slots or gradient buffers, so that it is in flight during that
// compute too; on NCCL in one queue (parallel.nccl_pipeline_lanes = false), and on lanes while bench
// --phases fences the device, where Megatron posts it, with the sends after the compute before
// its use. The ops differ, the computes and their order do not: the gradients are bitwise the
// same on every backend and with the waits right after their posts.
//
// Tokens: the ranks whose chunks hold the embedding or the head keep each micro-batch's tokens
// on the device from its forward to its backward (MicroBatchQueue): sampled once, the next one
// sampled and uploaded while the current forward runs.
//
// Activation memory: each micro-batch between its forward and its backward keeps its own
// activation slot in its chunk (GptModel::bind_slot): a chunk reserves as many slots as the
// schedule has micro-batches in flight on it (from the receive of its input), and what a slot
// holds is the choice of training.recompute (src/model/spec/recompute.hpp). A received stage input
// goes straight into its micro-batch's slot. With v > 1 a received gradient waits in one of
// the model's received-gradient buffers (as many as the schedule has waiting at once) and is
// copied into the model's output gradient before its backward; with v = 1 it is received there.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "src/model/gpt_model.hpp"
#include "src/parallel/communicator.hpp"
#include "src/train/micro_batches.hpp"
#include "src/schedule/pipeline_schedule.hpp"

namespace tptrain::train {

// The schedule's vocabulary (src/schedule): the runner executes its ops.
using schedule::Matching;
using schedule::PipelineOp;
using schedule::PipelinePlace;
using schedule::PipelineTransfer;
using schedule::Schedule;

struct PipelineStats {
  double p2p_wait_s = 0;       // time in communication ops (includes the pipeline bubble)
};

// Executes a schedule on one stage (T: the model's storage type; stage tensors travel in it).
template <class T>
class PipelineRunner {
 public:
  // `documents`: what the micro-batches' packed documents need (data.document_mask,
  // data.reset_positions): with any, every chunk reads its micro-batch (the attention of every
  // block masks by document), not only those holding the embedding or the head.
  PipelineRunner(model::GptModel<T>& model, parallel::Communicator& pp, Schedule schedule, bool overlap = true,
                 const Documents& documents = {});

  // Forward and backward of micro-batches 0..M-1 with loss scale `scale`. `sample(m, inputs,
  // targets)` writes the tokens/targets of micro-batch m into host memory; it is called once per
  // micro-batch, on the ranks whose chunks hold the embedding or the head, micro-batch m + 1
  // while m's forward runs (MicroBatchQueue). `bucket_done(m, b)` is called when gradient bucket
  // b (GptModel::buckets()) has micro-batch m's contribution, `bucket_begin(m, b)` before the
  // backward writes the first of it. Returns the sum of the token losses (last stage; 0 elsewhere).
  double run(const kx::ExecSpace& exec, int micro_batches, float scale, const MicroBatchQueue::Sample& sample,
             const std::function<void(int, std::size_t)>& bucket_done,
             const std::function<void(int, std::size_t)>& bucket_begin = {});

  // Allocates the activation slots and micro-batch buffers `micro_batches` per step need under
  // the schedule (run() does it too; call it first to have the memory allocated before the first
  // step).
  void reserve(int micro_batches);

  Schedule schedule() const { return schedule_; }
  void set_schedule(Schedule s) { schedule_ = s; }
  bool overlap() const { return overlap_; }
  void set_overlap(bool on) { overlap_ = on; }
  // How the PP backend matches transfers: what the schedule's receive places are proven for.
  Matching matching() const { return matching_; }
  const PipelineStats& stats() const { return stats_; }
  // This rank's micro-batch tokens (tests count its samples()).
  const MicroBatchQueue& batches() const { return batches_; }
  PipelinePlace place() const;

 private:
  void connect_lanes();
  bool uses_tokens(int chunk) const;
  void bind_documents(int chunk, const TrainingBatch& b);
  int acquire_slot(int chunk, int m);
  int acquire_received(int chunk, int m);

  model::GptModel<T>& model_;
  parallel::Communicator& pp_;
  Schedule schedule_;
  bool overlap_;
  Matching matching_;
  bool documents_;
  std::vector<std::vector<int>> free_;         // per chunk: free activation slots
  std::vector<std::vector<int>> slot_of_;      // per chunk: micro-batch -> activation slot
  std::vector<int> free_received_;             // free received-gradient buffers (v > 1)
  std::vector<std::vector<int>> received_of_;  // per chunk: micro-batch -> received-gradient buffer
  Kokkos::View<double, kx::MemSpace> loss_total_{"pipeline.loss_total"};  // summed on the device
  kernels::Tokens no_tokens_;                  // middle stages use no tokens
  MicroBatchQueue batches_;                    // the token-using chunks' micro-batches
  PipelineStats stats_;
};

}  // namespace tptrain::train
