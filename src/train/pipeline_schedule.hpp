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
// Transfers travel in groups (a `post` op: on NCCL one ncclGroupStart/End, on MPI isend/irecv)
// that a later `wait` op completes; between the two the rank computes (PipelineRunner: overlap).
// How transfers meet depends on the backend (Matching):
//   stream_order (NCCL): a rank's groups run one after the other on one stream, so they complete
//         in the order posted, a transfer only while both ranks' current groups hold it, and the
//         i-th send from a rank to a peer must be the i-th receive the peer posts from it.
//         Receives stay where Megatron posts them, together with the sends after a compute:
//         posted before the compute, a receive would hold back the sends queued behind it that
//         its own data depends on.
//   by_tag (MPI): every isend/irecv is its own request, matched by (source, tag) and completed
//         whenever both sides are posted, whatever else is pending. Each receive is posted one
//         compute earlier, before the compute that precedes its use, where that needs no more
//         memory (early_receives in pipeline_schedule.cpp), so it overlaps that compute.
//   per_flow (NCCL with lanes, Communicator::open_lanes): every flow — the activations from one
//         rank to the next, the gradients back — has a queue of its own on both of its ranks
//         (pipeline_lane), in which its transfers complete in order, matched by order; no flow
//         waits for another. The same ops as by_tag (early receives): a receive posted early
//         holds back only later receives of its own flow, which come after it anyway.
// simulate proves every schedule finishes under its backend's rule.
#pragma once

#include <string>
#include <vector>

namespace tptrain::train {

enum class Schedule { one_f_one_b, all_forward_all_backward };
// How the backend matches and completes transfers (above): NCCL stream_order, MPI by_tag.
enum class Matching { stream_order, by_tag, per_flow };
// "in order (NCCL)", "by tag (MPI)", "per flow (NCCL lanes)" (messages, tests).
const char* matching_name(Matching m);

// The lane (Communicator::open_lanes) of the flow of `direction` (0: activations to the next
// rank, 1: gradients to the previous) sent by rank `sender` of `ranks`: direction·colours +
// the sender's colour, where neighbours around the ring have different colours (2 colours; 3
// when `ranks` is odd, the last rank the third). Then on every rank each lane carries one flow
// only: the rank's own sends of that direction, or its receives from the one neighbour that
// sends it that direction. pipeline_lanes: how many lanes that is (0 for one rank).
int pipeline_lane(int sender, int ranks, int direction);
int pipeline_lanes(int ranks);
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

// The chunk of the peer rank that a transfer of `place` talks to.
int peer_chunk(const PipelinePlace& place, const PipelineTransfer& t);
// The message tag of a transfer: from the receiving virtual stage, the micro-batch and the
// direction; the same on both sides (v = 1: 2m + direction).
int transfer_tag(const PipelinePlace& place, const PipelineTransfer& t);

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

// Most micro-batches between their forward and their backward at once on chunk `chunk`: the
// activation slots that chunk needs.
int peak_in_flight(const std::vector<PipelineOp>& ops, int chunk = 0);
// Most received gradients waiting for their backward at once: the buffers a rank with v > 1
// receives them into (with v = 1 they go straight into the model's output gradient).
int peak_received_gradients(const std::vector<PipelineOp>& ops);

// What a rank's schedule keeps: activation slots per chunk (peak_in_flight) and received-gradient
// buffers (peak_received_gradients; 0 with v = 1). For interleaved 1F1B they stop growing with M
// once M >= p·(v + 1) (each chunk's warm-up is shorter), so they are computed on at most that
// many micro-batches: the plan asks for decks of millions of micro-batches. The same under
// both matchings (early receives are placed so that they need no more).
struct ScheduleMemory {
  std::vector<int> slots;  // [chunk]
  int received_gradients = 0;
  int total_slots() const;
};
ScheduleMemory schedule_memory(Schedule schedule, const PipelinePlace& place, int micro_batches, bool overlap = true,
                               Matching matching = Matching::stream_order);

// The result of running every rank's ops together (simulate).
struct PipelineSimulation {
  std::string problem;            // "" if every rank finished, else the deadlock or inconsistency
  double step_time = 0;           // time until the last rank finished
  double busy_time = 0;           // compute time of one rank (the same on every rank)
  std::vector<double> idle_time;  // per rank: step_time − busy_time
  struct Slot {
    double start = 0, end = 0;
    PipelineOp op;  // a forward or a backward
  };
  std::vector<std::vector<Slot>> computes;  // per rank, in order
  // Idle over busy time of the rank that idles most: the bubble, (p − 1)/(v·M) in theory.
  double bubble() const;
};

// Runs every rank's ops under `matching`'s rule: posts never block; stream_order (NCCL): each
// rank's groups complete in posting order, and a transfer completes only when the groups at the
// front of both ranks' queues hold it, pairs matched by order; by_tag (MPI): a transfer
// completes as soon as both sides are posted, a send meeting the first receive the peer posted
// from its rank with its tag (which must expect that micro-batch and chunk), and a group when all
// its transfers have; per_flow (NCCL lanes): as by_tag, but the transfers of a flow (sender,
// receiver, direction) complete one after the other, the i-th send with the i-th receive (which
// must expect that micro-batch and chunk). A wait blocks until its group completed; a forward needs its input, a
// backward its gradient, received and waited for; a backward may not overwrite the model's
// gradient buffer while the input gradient in it is still being sent, and with v = 1 no gradient
// is received into that buffer while it holds another. Each forward takes `forward_time`, each
// backward `backward_time` (of one chunk), transfers take no time.
PipelineSimulation simulate(Schedule schedule, int ranks, int micro_batches, int chunks, bool overlap = true,
                            double forward_time = 1, double backward_time = 2,
                            Matching matching = Matching::stream_order);
// The same for given ops of every rank (ops[r]: rank r's), M micro-batches of `chunks` chunks.
PipelineSimulation simulate(const std::vector<std::vector<PipelineOp>>& ops, int micro_batches, int chunks,
                            double forward_time = 1, double backward_time = 2,
                            Matching matching = Matching::stream_order);
// The computes of a simulation as text, one line per rank, one column per time unit: "F2b" is
// the forward of micro-batch 2 on chunk b (a = chunk 0), "B2b" its backward, "--" the further
// time units of a longer compute, "." idle. For integral compute times (docs/design.md).
std::string draw(const PipelineSimulation& sim);
// simulate(...).problem (tests).
std::string simulate_pipeline(Schedule schedule, int stages, int micro_batches, int chunks = 1, bool overlap = true,
                              Matching matching = Matching::stream_order);

}  // namespace tptrain::train
