// A deadlock simulator of pipeline schedules (tests only): runs every rank's ops together under
// the backend's matching rule and reports the first deadlock or inconsistency, the bubble and a
// drawing of the computes. It proves that every schedule src/schedule generates finishes.
#pragma once

#include <string>
#include <vector>

#include "src/schedule/pipeline_schedule.hpp"

namespace tptrain::schedule {

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

}  // namespace tptrain::schedule
