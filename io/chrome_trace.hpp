// A timeline in the Chrome trace event format (the JSON object format of "Trace Event Format",
// Google, the one chrome://tracing and Perfetto open): `plan --trace` writes the simulated step,
// `bench --trace` the measured one, in the same layout so that a user can lay them side by side.
// A process is a rank, a thread one of its streams (compute, a communicator's stream).
#pragma once

#include <string>
#include <vector>

namespace tptrain::io {

// One complete event ("ph": "X"): `name` on track (rank, stream) from start_us for duration_us.
struct TraceSpan {
  std::string name;      // "forward 3.1", "all-reduce tensor", ...
  std::string category;  // "compute", "tensor", "pipeline", "data", ... (Perfetto colours by it)
  int rank = 0;          // the trace's pid
  int stream = 0;        // the trace's tid
  double start_us = 0;
  double duration_us = 0;
};

// The name of a track, shown instead of its number.
struct TraceTrack {
  int rank = 0;
  int stream = 0;
  std::string name;  // "compute", "tensor-parallel", ...
};

class ChromeTrace {
 public:
  void span(TraceSpan s) { spans_.push_back(std::move(s)); }
  void track(TraceTrack t) { tracks_.push_back(std::move(t)); }
  const std::vector<TraceSpan>& spans() const { return spans_; }
  // {"displayTimeUnit": "ms", "traceEvents": [...]}: the metadata events naming processes
  // ("rank R") and threads, then the spans in the order added.
  std::string json() const;
  // Writes json() to `path`; throws std::runtime_error naming the path when it cannot.
  void write(const std::string& path) const;

 private:
  std::vector<TraceSpan> spans_;
  std::vector<TraceTrack> tracks_;
};

}  // namespace tptrain::io
