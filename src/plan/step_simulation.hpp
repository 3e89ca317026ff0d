// A discrete-event simulation of one training step (docs/planning.md, "The step simulation"):
// each pipeline rank runs the ops it really executes — schedule::pipeline_ops (1F1B, interleaved)
// for its stage, each op a chunk's blocks (block_time.hpp: GEMMs, attention, memory-bound
// kernels, the tensor/sequence-parallel collectives, the experts' all-to-alls, ring attention),
// the embedding on the first virtual stage and the head on the last. Resources: each rank's
// compute stream, its data-parallel stream and the pipeline link to each neighbour. A forward
// starts when its rank is free and the previous virtual stage's output has crossed the link;
// a backward when the next virtual stage's gradient has. As the gradient reducer does
// (src/train/gradient_reducer.hpp), each block's bucket is reduced over data x context (the
// experts' over their expert-data group) on the data stream as soon as the last micro-batch's
// backward has passed it — all-reduced, or reduce-scattered with the distributed optimizer — and
// the step waits for what is left of them after the backward (the exposed tail). Then the tied
// embedding's two copies are summed, the gradient norm's all-reduce joins every rank, AdamW
// updates the rank's (shard of the) parameters bucket by bucket and, with the distributed
// optimizer, each bucket's updated values are all-gathered while the next is updated (with
// Config::overlap_parameter_gather, Megatron's, beside the next step's first forwards instead).
// Where a CPU node's ranks share its cores (Machine::rank_time_share), a stretch of the step in
// which only some of them compute is shortened by the cores the others lend them.
//
// Every tensor, context, data and expert rank of a stage does the same work at the same time, so
// one rank per stage is simulated (rank tp 0, cp 0, dp 0 of each stage, its groups' spans over
// nodes taken from the rank map under parallel.order): the simulation's cost grows with pipeline
// x virtual stages x micro-batches, not with the GPUs (4608 GPUs take milliseconds).
//
// What it ignores: congestion between communicators sharing a link or NIC, stragglers, kernel
// launch jitter, clock throttling, host overheads, the data loader.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "io/chrome_trace.hpp"
#include "src/plan/block_time.hpp"
#include "src/plan/machine.hpp"
#include "src/plan/plan_config.hpp"

namespace tptrain::plan {

// Where a rank's step time goes; the parts add up to the step time.
struct StepBreakdown {
  int stage = 0;
  int world_rank = 0;
  double compute = 0;    // kernels on the compute stream (recomputation included)
  double tensor = 0;     // tensor/sequence-parallel collectives the compute waits for
  double context = 0;    // ring attention's transfers not hidden by its compute
  double expert = 0;     // the experts' all-to-alls
  double bubble = 0;     // idle: waiting for other stages (the pipeline bubble, the last stage's longer head, ...)
  double data = 0;       // gradient reductions not hidden by the backward, the embedding's sum, the gathers' tail
  double optimizer = 0;  // AdamW's update of the rank's (shard of the) parameters
  double total() const { return compute + tensor + context + expert + bubble + data + optimizer; }
};

struct StepSimulation {
  double step_seconds = 0;
  double model_flops = 0;  // per step (model::training_flops_per_token x tokens)
  double mfu = 0;          // model_flops / (step_seconds x GPUs x peak)
  double peak_flops = 0;   // per GPU, for the precision
  StepBreakdown average;      // over the ranks (every stage holds as many)
  StepBreakdown most_loaded;  // the rank with the least idle time
  std::vector<StepBreakdown> stages;
};

// Throws std::invalid_argument when the pipeline schedule does not exist for the deck's counts
// (schedule::schedule_problem: interleaving needs the micro-batches a multiple of the pipeline).
// `trace`: when given, every simulated rank's compute, communicator and link spans are added.
// The trace holds every rank, each of a stage with its stage's timeline (they run the same), for
// worlds of up to kTraceEveryRankUpTo ranks; beyond, one rank per stage (trace_note says so).
StepSimulation simulate_step(const Config& c, const Machine& m, io::ChromeTrace* trace = nullptr);

inline constexpr std::int64_t kTraceEveryRankUpTo = 1024;

// A bound the step time is never below: the blocks' kernels on the compute stream of the last
// stage, (M·v + P − 1) chunks forward and backward, the pipeline's fill and drain included (its
// embedding, head and communication left out). What
// `plan --search` skips a layout by when the bound is slower than the best it has found.
double compute_lower_bound(const Config& c, const Machine& m);
// "" when the trace holds every rank, else a sentence saying which it holds.
std::string trace_note(const Config& c);

}  // namespace tptrain::plan
