// What a rank's pipeline schedule keeps in memory: activation slots per chunk and received
// gradient buffers, counted on its ops. Read by the training run (the slots it allocates) and
// by the planner (src/plan), which must not need the model.
#pragma once

#include <vector>

#include "src/schedule/pipeline_schedule.hpp"

namespace tptrain::schedule {

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

}  // namespace tptrain::schedule
