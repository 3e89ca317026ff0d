// Pipeline schedules: which stage runs which micro-batch of which model chunk when, and what it
// sends where. Pure functions, no MPI; PipelineRunner (pipeline_runner.hpp) executes them.
//
// A rank r of p holds v model chunks (parallel.virtual_stages; v = 1: one contiguous stage).
// Chunk c of rank r is virtual stage c·p + r of p·v (Narayanan et al. 2021, §2.2.2; Megatron's
// round-robin assignment): activations go from virtual stage s to s + 1, i.e. from rank r to
// rank r + 1, and from the last rank back to rank 0 (chunk c to chunk c + 1); gradients the
// other way. The first virtual stage (rank 0, chunk 0) holds the embedding, the last (rank
// p − 1, chunk v − 1) the head.
//
// Schedules (Megatron-LM schedules.py):
//   1F1B, v = 1 (forward_backward_pipelining_without_interleaving): stage r runs
//         w = min(p − r − 1, M) warm-up forwards, then alternates one forward and one backward
//         M − w times, then runs the w remaining backwards. At most p − r micro-batches are
//         between their forward and their backward on stage r.
//   1F1B, v > 1 (forward_backward_pipelining_with_interleaving): the v·M chunk forwards run in
//         groups of p micro-batches per chunk (micro-batches 0..p−1 on chunk 0, then on chunk 1,
//         ..., then micro-batches p..2p−1 on chunk 0, ...), the backwards in the same groups
//         from chunk v − 1 down; w = (p − r − 1)·2 + (v − 1)·p warm-up forwards (all of them
//         when M = p), then one forward and one backward alternately, then the remaining
//         backwards. Requires M to be a multiple of p (schedule_problem): the groups of p
//         micro-batches are what lets chunk c + 1 of rank 0 find the output of chunk c of rank
//         p − 1 already sent; Megatron refuses other M for the same reason.
//   all-forward-all-backward (GPipe): every forward (chunk by chunk), then every backward;
//         M micro-batches in flight per chunk.
// Every schedule runs the backwards of a chunk in micro-batch order 0..M−1, so the gradients
// (which accumulate in that order) are bitwise the same under all of them and with any v.
//
// Transfers travel in groups (a `post` op) that a later `wait` op completes; how they meet
// depends on the backend (Matching, transport.hpp). The overlap rewrites (overlap.hpp) move the
// waits and receives so that transfers run during computes; tests/schedule/pipeline_simulator
// proves every schedule finishes under its backend's rule.
#pragma once

#include <string>
#include <vector>

namespace tptrain::schedule {

enum class Schedule { one_f_one_b, all_forward_all_backward };
// How the backend matches and completes transfers (above): NCCL stream_order, MPI by_tag.
enum class Matching { stream_order, by_tag, per_flow };
// "in order (NCCL)", "by tag (MPI)", "per flow (NCCL lanes)" (messages, tests).
const char* matching_name(Matching m);
const char* schedule_name(Schedule s);

// Where a rank stands: rank `rank` of `ranks` in the pipeline, holding `chunks` model chunks.
struct PipelinePlace {
  int rank = 0;
  int ranks = 1;
  int chunks = 1;
  int virtual_stage(int chunk) const { return chunk * ranks + rank; }
  bool first_virtual(int chunk) const { return rank == 0 && chunk == 0; }
  bool last_virtual(int chunk) const { return rank == ranks - 1 && chunk == chunks - 1; }
};

// One transfer of a posted group.
struct PipelineTransfer {
  int peer = 0;        // +1: the next rank (rank + 1 mod p), -1: the previous one
  bool send = false;
  int direction = 0;   // 0: activation (forward), 1: gradient (backward)
  int micro_batch = -1;
  int chunk = 0;       // this rank's chunk the data comes from (send) or goes to (receive)
};

// One step of a rank's schedule.
struct PipelineOp {
  enum Kind { forward, backward, post, wait };
  Kind kind = forward;
  int micro_batch = -1;                     // forward / backward
  int chunk = 0;                            // forward / backward
  std::vector<PipelineTransfer> transfers;  // post: in the order they are posted
  int group = -1;                           // post / wait: the group's number on this rank, 0, 1, ...
};

// "" if the schedule exists for these counts, else why not (naming the deck keys).
std::string schedule_problem(Schedule schedule, int ranks, int micro_batches, int chunks);

// The ops of `place` for `micro_batches` micro-batches (pure; no MPI). Throws
// std::invalid_argument for counts schedule_problem refuses. `overlap`: each group's wait is put
// just before the op that needs its data (or that reuses its buffer), so that the transfers run
// during the compute before it, and under by_tag each receive is posted a compute earlier where
// that costs no memory; without it, every group is waited for right after its post, where
// Megatron posts it (the same ops for both matchings).
std::vector<PipelineOp> pipeline_ops(Schedule schedule, const PipelinePlace& place, int micro_batches,
                                     bool overlap = true, Matching matching = Matching::stream_order);
// v = 1.
std::vector<PipelineOp> pipeline_ops(Schedule schedule, int stage, int stages, int micro_batches);

}  // namespace tptrain::schedule
