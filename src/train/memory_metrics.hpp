// The measured memory of a job as it is reported (docs/design.md, "Memory accounting"): this
// rank's ledger (util/memory_ledger.hpp) and resident set, and the largest peaks over all ranks,
// as named integer fields for metrics.jsonl and `tptrain bench`, and as a line for the log.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tptrain::train {

using NamedBytes = std::vector<std::pair<std::string, std::int64_t>>;

// In this order: mem_<category>_bytes (live now, every category: weights, gradients,
// optimizer_state, activations, workspace, communication, checkpoint, other), with
// `category_peaks` also mem_<category>_peak_bytes (each category's high-water mark), then
// mem_peak_bytes (high-water mark of the total), mem_peak_bytes_max_rank (its maximum over the
// ranks of `world`), mem_rss_bytes, mem_peak_rss_bytes (resident set now and at its peak) and
// mem_peak_rss_bytes_max_rank. Every value but the two *_max_rank ones is the calling rank's
// (rank 0 reports them). Collective over `world`: every rank calls it at the same point.
NamedBytes measured_memory_fields(MPI_Comm world, bool category_peaks = false);

// This rank's ledger in one line: the total now and at its peak, each category (its peak too
// where it was higher), each memory space when there is more than one, the resident set.
std::string measured_memory_summary();

}  // namespace tptrain::train
