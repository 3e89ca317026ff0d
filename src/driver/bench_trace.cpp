#include "src/driver/bench_trace.hpp"

#include <fmt/format.h>

#include <set>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"

namespace tptrain::driver {

namespace {

using util::Phase;

struct Placement {
  TraceStream stream;
  const char* name;      // "" for compute: the op's name, else the phase's
  const char* category;  // Perfetto colours by it
};

// The names and streams are those of the planner's simulated trace (src/plan/step_simulation.cpp,
// block_time.cpp) where the work is the same; the pipeline's is not: the simulation shows each
// transfer on the link, the measurement the rank's posts and waits, the bubble included.
Placement placement(Phase p) {
  switch (p) {
    case Phase::tp_comm: return {TraceStream::tensor, "all-reduce (tensor parallel)", "tensor"};
    case Phase::cp_comm: return {TraceStream::context, "ring wait", "context"};
    case Phase::ep_comm: return {TraceStream::expert, "all-to-all (experts)", "expert"};
    case Phase::pipeline_wait: return {TraceStream::pipeline, "send/recv pipeline", "pipeline"};
    case Phase::dp_comm: return {TraceStream::data, "all-reduce gradients", "data"};
    case Phase::dp_gather: return {TraceStream::data, "all-gather weights", "data"};
    case Phase::optimizer: return {TraceStream::compute, "optimizer", "optimizer"};
    default: return {TraceStream::compute, "", "compute"};  // gemm, attention, norms, loss, other
  }
}

// Shorter than this, host time outside every op and phase is not a span of its own.
constexpr double kShortGap = 10e-6;

// Per interval on the wire: phase, op kind, micro-batch, chunk, start and end (s from the step's start).
constexpr int kFields = 6;

}  // namespace

const char* trace_stream_name(TraceStream s) {
  static constexpr const char* names[kTraceStreamCount] = {"compute",  "tensor-parallel", "context-parallel",
                                                           "expert-parallel", "pipeline", "data-parallel"};
  return names[static_cast<int>(s)];
}

std::string step_op_name(const util::StepOp& op) {
  if (op.kind == util::StepOp::none) return "";
  return fmt::format("{} {}.{}", op.kind == util::StepOp::forward ? "forward" : "backward", op.micro_batch, op.chunk);
}

TraceStreams trace_streams(const parallel::Layout& l) {
  TraceStreams s{};
  s[static_cast<int>(TraceStream::compute)] = true;
  s[static_cast<int>(TraceStream::tensor)] = l.tensor > 1;
  s[static_cast<int>(TraceStream::context)] = l.context > 1;
  s[static_cast<int>(TraceStream::expert)] = l.expert > 1;
  s[static_cast<int>(TraceStream::pipeline)] = l.pipeline > 1;
  // The gradients are reduced over data x context (the context ranks hold the same weights).
  s[static_cast<int>(TraceStream::data)] = l.data * l.context > 1;
  return s;
}

std::vector<io::TraceSpan> trace_spans(int rank, const std::vector<util::PhaseInterval>& intervals,
                                       double step_start, const TraceStreams& streams) {
  std::vector<io::TraceSpan> spans;
  // The last span and its end time (s) on each stream, to merge what follows it without a gap.
  std::vector<int> last(kTraceStreamCount, -1);
  std::vector<double> last_end(kTraceStreamCount, 0.0);
  for (const util::PhaseInterval& i : intervals) {
    Placement where = placement(i.phase);
    if (!streams[static_cast<std::size_t>(where.stream)]) where = {TraceStream::compute, "", "compute"};
    std::string name = where.name;
    // Compute inside a forward or backward carries the op's name; outside, "other" (sampling, host
    // bookkeeping, the loss's reductions to every rank; the norm's are the optimizer's).
    if (name.empty()) name = i.op.kind != util::StepOp::none ? step_op_name(i.op) : "other";
    const int s = static_cast<int>(where.stream);
    // The host's bookkeeping between two ops (a microsecond or so, no op open): not a span.
    const bool gap = i.op.kind == util::StepOp::none && name == "other";
    if (gap && i.end - i.start < kShortGap) continue;
    // The same work again on its stream after no other span, or after only such a gap: one span
    // (a pipeline group's posts and its wait, one forward's GEMMs and norms).
    const bool follows = last[s] >= 0 && last[s] + 1 == static_cast<int>(spans.size()) &&
                         i.start - last_end[s] < kShortGap && spans[static_cast<std::size_t>(last[s])].name == name;
    if (follows) {
      spans[static_cast<std::size_t>(last[s])].duration_us = (i.end - step_start) * 1e6 - spans[static_cast<std::size_t>(last[s])].start_us;
    } else {
      spans.push_back({name, where.category, rank, s, (i.start - step_start) * 1e6, (i.end - i.start) * 1e6});
      last[s] = static_cast<int>(spans.size()) - 1;
    }
    last_end[s] = i.end;
  }
  return spans;
}

void write_step_trace(MPI_Comm world, const parallel::Layout& layout,
                      const std::vector<util::PhaseInterval>& intervals, double step_start, const std::string& path) {
  int rank = 0, size = 1;
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(world, &rank));
  TPTRAIN_MPI_CHECK(MPI_Comm_size(world, &size));
  // Times relative to each rank's own start: steady_clock need not agree between nodes.
  std::vector<double> mine;
  mine.reserve(intervals.size() * kFields);
  for (const util::PhaseInterval& i : intervals)
    mine.insert(mine.end(), {double(static_cast<int>(i.phase)), double(static_cast<int>(i.op.kind)),
                             double(i.op.micro_batch), double(i.op.chunk), i.start - step_start, i.end - step_start});
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  TPTRAIN_MPI_CHECK(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, world));
  std::vector<double> all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < size; ++r) {
      offsets[static_cast<std::size_t>(r)] = total;
      total += counts[static_cast<std::size_t>(r)];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  TPTRAIN_MPI_CHECK(MPI_Gatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(), offsets.data(), MPI_DOUBLE,
                                0, world));
  parallel::on_every_rank(world, [&] {
    if (rank != 0) return;
    io::ChromeTrace trace;
    for (int r = 0; r < size; ++r) {
      std::vector<util::PhaseInterval> theirs;
      const std::size_t from = static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]);
      for (std::size_t k = from; k < from + static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]); k += kFields)
        theirs.push_back({static_cast<Phase>(static_cast<int>(all[k])),
                          {static_cast<util::StepOp::Kind>(static_cast<int>(all[k + 1])), static_cast<int>(all[k + 2]),
                           static_cast<int>(all[k + 3])},
                          all[k + 4],
                          all[k + 5]});
      std::set<int> streams{static_cast<int>(TraceStream::compute)};
      for (io::TraceSpan& s : trace_spans(r, theirs, 0.0, trace_streams(layout))) {
        streams.insert(s.stream);
        trace.span(std::move(s));
      }
      for (int s : streams) trace.track({r, s, trace_stream_name(static_cast<TraceStream>(s))});
    }
    trace.write(path);
  });
}

}  // namespace tptrain::driver
