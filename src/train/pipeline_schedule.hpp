// Pipeline schedules: which stage runs which micro-batch when, and what it sends where. Pure
// functions, no MPI; PipelineRunner (pipeline_runner.hpp) executes them.
//
// Schedules (Megatron-LM schedules.py, forward_backward_pipelining_without_interleaving):
//   1F1B: stage p of P runs w = min(P - p - 1, M) warm-up forwards, then alternates one forward
//         and one backward M - w times, then runs the w remaining backwards. At most P - p
//         micro-batches are between their forward and their backward on stage p.
//   all-forward-all-backward (GPipe): M forwards, then M backwards; M micro-batches in flight.
// Both run the backwards in micro-batch order 0..M-1 on every stage, so the gradients (which
// accumulate in that order) are bitwise the same under both.
//
// Communication ops post all their transfers and then wait for all of them, as Megatron's
// send_forward_recv_backward etc.: no transfer is pending outside an op, so buffers are free
// again after it. An op talks to one neighbour only, and the two stages of a pair post their
// halves in matching order (transfers_of), so the schedule cannot deadlock even if each
// transfer were a blocking rendezvous (simulate_pipeline checks that).
#pragma once

#include <string>
#include <vector>

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

}  // namespace tptrain::train
