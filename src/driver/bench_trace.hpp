// `tptrain bench --trace FILE.json`: the measured timeline of one training step, in the Chrome
// trace format of io/chrome_trace.hpp (the writer `plan --trace` uses too), so that the measured
// and the simulated step open side by side in Perfetto.
//
// Layout: a process per world rank ("rank R"), a thread per stream of that rank:
//   0 compute          forwards and backwards ("forward 3.0": micro-batch 3, chunk 0), "optimizer",
//                      "other"
//   1 tensor-parallel  "all-reduce (tensor parallel)" (also the all-gathers and reduce-scatters of
//                      sequence parallelism and the loss's reductions: the phase tp_comm)
//   2 context-parallel "ring wait" (ring attention's K/V transfers not hidden by its blocks)
//   3 expert-parallel  "all-to-all (experts)" (dispatch and combine)
//   4 pipeline         "send/recv pipeline" (posts and waits, the bubble included)
//   5 data-parallel    "all-reduce gradients" (bucket reductions and their waits)
// Streams, their numbers and names are those of `plan --trace` (src/plan/block_time.hpp, Stream).
// Times are microseconds from the step's start on each rank (the ranks start it after a barrier).
//
// What is measured is host-side: PhaseClock (src/util/phases.hpp) fences the device at every phase
// boundary and charges the wall time between boundaries to the innermost phase. So a span is the
// time the rank spent in that phase, exclusively: a collective's span is the part the host waited
// for (an overlapped data-parallel reduction shows only its launch and its exposed wait), and a
// forward is cut where its tensor-parallel all-reduces run. The fences make the traced step slower
// than an unfenced one on a GPU (on a CPU they cost next to nothing).
#pragma once

#include <mpi.h>

#include <array>
#include <string>
#include <vector>

#include "io/chrome_trace.hpp"
#include "src/parallel/topology_rank_map.hpp"
#include "src/util/phases.hpp"

namespace tptrain::driver {

enum class TraceStream : int { compute, tensor, context, expert, pipeline, data };
inline constexpr int kTraceStreamCount = static_cast<int>(TraceStream::data) + 1;

const char* trace_stream_name(TraceStream s);  // "compute", "tensor-parallel", ...

// "forward 3.0", "backward 0.1" (micro-batch.chunk, as the simulated trace); "" for StepOp::none.
std::string step_op_name(const util::StepOp& op);

// Which streams a layout has: a communicator of one rank has no stream (its phase, entered for a
// collective that returns at once, is the compute stream's time).
using TraceStreams = std::array<bool, kTraceStreamCount>;
TraceStreams trace_streams(const parallel::Layout& layout);

// The spans of one rank's intervals (in the order recorded), times relative to `step_start`
// (steady_clock seconds): each interval on its phase's stream and name (on compute, with the
// op's name, where the layout lacks that stream). An interval that follows the last span (of any
// stream) on its stream under the same name, within 10 us, extends it; host time outside every op
// and phase ("other") shorter than that is no span, so that a pipeline group's posts and wait,
// split by the runner's bookkeeping, are one span.
std::vector<io::TraceSpan> trace_spans(int rank, const std::vector<util::PhaseInterval>& intervals,
                                       double step_start, const TraceStreams& streams);

// Collective over `world`: every rank's intervals gathered to rank 0, which writes the trace to
// `path` (a track named for every stream a rank has spans on, and compute always). When it cannot
// write there, every rank throws the same parallel::AgreedError, naming the path.
void write_step_trace(MPI_Comm world, const parallel::Layout& layout,
                      const std::vector<util::PhaseInterval>& intervals, double step_start, const std::string& path);

}  // namespace tptrain::driver
