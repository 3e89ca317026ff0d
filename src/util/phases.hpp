// Where a training step spends its time: every piece of the step runs inside one named phase
// (GEMMs, attention, norms and elementwise, loss, optimizer, tensor-parallel and data-parallel
// communication, pipeline waiting). A phase is a Kokkos profiling region "tptrain::<phase>", so
// Kokkos Tools (kernel timer, space-time stack, the NVTX connector under nsys) show the same
// names as `tptrain bench`.
//
// Timing is off unless `tptrain bench --phases` turns it on: then each phase boundary fences the
// device and the wall time between boundaries goes to the innermost open phase (exclusive times: a
// tensor-parallel all-reduce inside a linear layer counts as communication, not as GEMM), so the
// phases add up to the step. Those fences serialise the device (about 900 per micro-batch at
// GPT-2 124M), so the bench measures tokens/s and MFU with timing off. Off, a phase costs a
// region push/pop and nothing else (no fence); fences() counts the fences timing has issued.
// Host-side state of one process (one rank); not thread-safe (the training loop is one thread).
//
// `bench --trace` records the same boundaries as a timeline: with record() on, every stretch of
// wall time charged to a phase is also kept as an interval, labelled with the pipeline op it ran
// in (StepOp: the forward or backward of a micro-batch on a model chunk, set by PipelineRunner),
// so that the timeline says "forward 3.0" where the phase table says "gemm".
#pragma once

#include <Kokkos_Core.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

namespace tptrain::util {

enum class Phase : int {
  gemm,               // linear layers, the logits (KokkosBlas / cuBLAS)
  attention,          // causal attention core between QKV and its projection
  norms_elementwise,  // LayerNorm, GELU, bias, residual adds, embeddings
  loss,               // vocab-parallel cross-entropy and its gradient (without the logits GEMM)
  optimizer,          // gradient norm, clipping, AdamW
  tp_comm,            // tensor-parallel all-reduces (f, g and the loss's)
  dp_comm,            // data-parallel gradient all-reduce (reduce-scatter) not hidden by the backward
  dp_gather,          // sharded parameters' weight all-gathers not hidden by the module before
  cp_comm,            // ring attention's K/V transfers not hidden by its blocks (context parallelism)
  ep_comm,            // the mixture of experts' all-to-alls: dispatch and combine (expert parallelism)
  pipeline_wait,      // pipeline transfers and bubble, tied-embedding gradient sum
  other,              // everything else in a step (data loading, host bookkeeping)
};
inline constexpr int kPhaseCount = static_cast<int>(Phase::other) + 1;

inline const char* phase_name(Phase p) {
  static constexpr const char* names[kPhaseCount] = {
      "gemm", "attention", "norms_elementwise", "loss", "optimizer", "tp_comm", "dp_comm", "dp_gather", "cp_comm",
      "ep_comm", "pipeline_wait", "other"};
  return names[static_cast<int>(p)];
}

// The pipeline op a stretch of time belongs to (none: outside every forward and backward).
struct StepOp {
  enum Kind : int { none, forward, backward };
  Kind kind = none;
  int micro_batch = -1, chunk = -1;
};

// One stretch of wall time charged to `phase` (steady_clock seconds), inside `op`.
struct PhaseInterval {
  Phase phase = Phase::other;
  StepOp op;
  double start = 0, end = 0;
};

class PhaseClock {
 public:
  using Seconds = std::array<double, kPhaseCount>;

  static PhaseClock& instance() {
    static PhaseClock clock;
    return clock;
  }

  void set_timing(bool on) { timing_ = on; }
  bool timing() const { return timing_; }
  const Seconds& seconds() const { return seconds_; }
  void reset() { seconds_.fill(0.0); }
  std::int64_t fences() const { return fences_; }
  // While timing, also appends every charged interval to `*out` (nullptr: stop recording).
  void record(std::vector<PhaseInterval>* out) { record_ = out; }
  const StepOp& op() const { return op_; }
  // Enters or leaves a pipeline op: while timing, the time so far goes to the open phase under
  // the op before (a fence), so that no interval spans two ops.
  void set_op(StepOp op) {
    if (timing_ && !open_.empty()) charge(open_.back(), fenced_now());
    op_ = op;
  }

  void enter(Phase p) {
    Kokkos::Profiling::pushRegion(region_name(p));
    if (!timing_) return;
    const double now = fenced_now();
    if (!open_.empty()) charge(open_.back(), now);
    open_.push_back(p);
    since_ = now;
  }
  void leave() {
    Kokkos::Profiling::popRegion();
    if (!timing_ || open_.empty()) return;
    charge(open_.back(), fenced_now());
    open_.pop_back();
  }

 private:
  static const char* region_name(Phase p) {
    static constexpr const char* names[kPhaseCount] = {
        "tptrain::gemm",    "tptrain::attention", "tptrain::norms_elementwise", "tptrain::loss",
        "tptrain::optimizer", "tptrain::tp_comm", "tptrain::dp_comm", "tptrain::dp_gather", "tptrain::cp_comm",
        "tptrain::ep_comm",
        "tptrain::pipeline_wait",
        "tptrain::other"};
    return names[static_cast<int>(p)];
  }
  double fenced_now() {
    Kokkos::fence();  // device work launched in a phase belongs to it
    ++fences_;
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  void charge(Phase p, double now) {
    seconds_[static_cast<int>(p)] += now - since_;
    if (record_ && now > since_) record_->push_back({p, op_, since_, now});
    since_ = now;
  }

  bool timing_ = false;
  Seconds seconds_{};
  std::vector<Phase> open_;
  double since_ = 0.0;
  std::int64_t fences_ = 0;
  std::vector<PhaseInterval>* record_ = nullptr;
  StepOp op_;
};

// Runs the enclosing scope as phase p.
class PhaseScope {
 public:
  explicit PhaseScope(Phase p) { PhaseClock::instance().enter(p); }
  ~PhaseScope() { PhaseClock::instance().leave(); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;
};

// Runs the enclosing scope as a pipeline op (the forward or backward of micro-batch m on chunk c).
class StepOpScope {
 public:
  StepOpScope(StepOp::Kind kind, int micro_batch, int chunk) { PhaseClock::instance().set_op({kind, micro_batch, chunk}); }
  ~StepOpScope() { PhaseClock::instance().set_op({}); }
  StepOpScope(const StepOpScope&) = delete;
  StepOpScope& operator=(const StepOpScope&) = delete;
};

}  // namespace tptrain::util
