#include "src/schedule/schedule_memory.hpp"

#include <algorithm>
#include <set>
#include <utility>

namespace tptrain::schedule {

int peak_in_flight(const std::vector<PipelineOp>& ops, int chunk) {
  // A micro-batch holds its slot from its input's receive (or its forward) to its backward.
  std::set<int> held;
  int peak = 0;
  for (const PipelineOp& op : ops) {
    if (op.kind == PipelineOp::post) {
      for (const PipelineTransfer& t : op.transfers)
        if (!t.send && t.direction == 0 && t.chunk == chunk) held.insert(t.micro_batch);
    } else if (op.chunk == chunk && op.kind == PipelineOp::forward) {
      held.insert(op.micro_batch);
    } else if (op.chunk == chunk && op.kind == PipelineOp::backward) {
      held.erase(op.micro_batch);
    }
    peak = std::max(peak, static_cast<int>(held.size()));
  }
  return peak;
}

int peak_received_gradients(const std::vector<PipelineOp>& ops) {
  int now = 0, peak = 0;
  std::set<std::pair<int, int>> waiting;
  for (const PipelineOp& op : ops) {
    if (op.kind == PipelineOp::post) {
      for (const PipelineTransfer& t : op.transfers)
        if (!t.send && t.direction == 1) waiting.insert({t.chunk, t.micro_batch});
    } else if (op.kind == PipelineOp::backward) {
      waiting.erase({op.chunk, op.micro_batch});
    }
    now = static_cast<int>(waiting.size());
    peak = std::max(peak, now);
  }
  return peak;
}

int ScheduleMemory::total_slots() const {
  int n = 0;
  for (int s : slots) n += s;
  return n;
}

ScheduleMemory schedule_memory(Schedule schedule, const PipelinePlace& place, int micro_batches, bool overlap,
                               Matching matching) {
  ScheduleMemory out;
  if (place.chunks == 1 && schedule == Schedule::one_f_one_b) {
    out.slots = {std::min(place.ranks - place.rank, micro_batches)};  // 1F1B's warm-up + 1
    return out;
  }
  int m = micro_batches;
  if (place.chunks > 1) m = std::min(m, place.ranks * (place.chunks + 1));
  const std::vector<PipelineOp> ops = pipeline_ops(schedule, place, m, overlap, matching);
  for (int c = 0; c < place.chunks; ++c) out.slots.push_back(peak_in_flight(ops, c));
  if (place.chunks > 1) out.received_gradients = peak_received_gradients(ops);
  return out;
}

}  // namespace tptrain::schedule
