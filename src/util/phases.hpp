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
  dp_comm,            // data-parallel gradient all-reduce not hidden by the backward
  cp_comm,            // ring attention's K/V transfers not hidden by its blocks (context parallelism)
  ep_comm,            // the mixture of experts' all-to-alls: dispatch and combine (expert parallelism)
  pipeline_wait,      // pipeline transfers and bubble, tied-embedding gradient sum
  other,              // everything else in a step (data loading, host bookkeeping)
};
inline constexpr int kPhaseCount = static_cast<int>(Phase::other) + 1;

inline const char* phase_name(Phase p) {
  static constexpr const char* names[kPhaseCount] = {
      "gemm", "attention", "norms_elementwise", "loss", "optimizer", "tp_comm", "dp_comm", "cp_comm", "ep_comm",
      "pipeline_wait", "other"};
  return names[static_cast<int>(p)];
}

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
        "tptrain::optimizer", "tptrain::tp_comm", "tptrain::dp_comm", "tptrain::cp_comm", "tptrain::ep_comm",
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
    since_ = now;
  }

  bool timing_ = false;
  Seconds seconds_{};
  std::vector<Phase> open_;
  double since_ = 0.0;
  std::int64_t fences_ = 0;
};

// Runs the enclosing scope as phase p.
class PhaseScope {
 public:
  explicit PhaseScope(Phase p) { PhaseClock::instance().enter(p); }
  ~PhaseScope() { PhaseClock::instance().leave(); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;
};

}  // namespace tptrain::util
