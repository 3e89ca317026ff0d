// The overlap rewrites of a schedule's ops: waits moved to just before the op that needs their
// data (overlapped), and, where the backend matches transfers by tag, receives posted one
// compute earlier (early_receives), both without more memory than the schedule's own peak.
#pragma once

#include <vector>

#include "src/schedule/pipeline_schedule.hpp"

namespace tptrain::schedule {

std::vector<PipelineOp> overlapped(const std::vector<PipelineOp>& in, int chunks);
std::vector<PipelineOp> early_receives(const std::vector<PipelineOp>& in, int chunks);

}  // namespace tptrain::schedule
