// <run.dir>/requeue: "this run stopped on request and wrote its checkpoint; run it again". A
// batch script cannot rely on the exit status alone: a launcher that receives the signal
// itself (mpiexec on SIGTERM, SIGINT or SIGHUP) exits with its own status (1) even though
// every rank stopped cleanly with 3. So rank 0 leaves this file, and the job scripts
// (jobs/slurm/requeue.sh) requeue when it exists, whatever the launcher returned
// (docs/design.md, "Stopping and requeueing").
#pragma once

#include <string>

namespace tptrain::io {

inline constexpr const char* kRequeueMarkerName = "requeue";

// <run_dir>/requeue.
std::string requeue_marker_path(const std::string& run_dir);

// Removes the marker of an earlier run (a run that fails must not be requeued for it). Throws
// std::runtime_error naming the file when it exists and cannot be removed.
void remove_requeue_marker(const std::string& run_dir);

// Writes `text` (one line: what stopped the run, the step and the checkpoint) to the marker,
// complete or not at all (a temporary file renamed into place). Returns "" or why it failed.
std::string write_requeue_marker(const std::string& run_dir, const std::string& text);

}  // namespace tptrain::io
