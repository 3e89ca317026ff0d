// Where the host waits in a training step: every place where the training loop's thread blocks
// until device work or a communication has finished calls note_host_wait with its kind, so that
// a test can count them per step and the list in docs/design.md ("Host waits") stays true.
// Counted are the waits that a GPU build keeps, and on the MPI backend the ones that MPI needs
// (a fence before MPI reads a buffer, the wait of a request). Not counted: fences that are
// no-ops on host backends and do not exist on a GPU (TokenSegments::build's and the micro-batch
// queue's on host memory, Kokkos 3.4's fence before a BLAS call), the test hook
// layer_seconds (base/test_hooks.hpp), and bench --phases' fences (PhaseClock::fences()).
// Host-side state of one process; not thread-safe (the training loop is one thread).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace tptrain::util {

enum class HostWait : int {
  batch_buffer_reuse,  // train::MicroBatchQueue: a pinned entry refilled after its copies' event
  loss_to_host,        // train::PipelineRunner::run: the step's loss, summed on the device, to the host
  norm_to_host,        // train::BucketOptimizer::grad_norm: the buckets' sums of squares to the host
  host_scalar_reduce,  // a blocking MPI reduction of host values (loss, norm, flags, agreement)
  request_wait,        // parallel::Request::wait on a pending operation (MPI: also every wait_on)
  mpi_fence,           // parallel::MpiCommunicator::start: the instance fenced before MPI reads
  staged_copy_back,    // parallel collectives: a staged result copied back to the device, fenced
};
inline constexpr int kHostWaitCount = static_cast<int>(HostWait::staged_copy_back) + 1;

inline const char* host_wait_name(HostWait w) {
  static constexpr const char* names[kHostWaitCount] = {"batch_buffer_reuse", "loss_to_host",  "norm_to_host",
                                                        "host_scalar_reduce", "request_wait", "mpi_fence",
                                                        "staged_copy_back"};
  return names[static_cast<int>(w)];
}

class HostWaits {
 public:
  using Counts = std::array<std::int64_t, kHostWaitCount>;
  static HostWaits& instance() {
    static HostWaits waits;
    return waits;
  }
  void note(HostWait w) { ++counts_[static_cast<std::size_t>(w)]; }
  const Counts& counts() const { return counts_; }
  std::int64_t count(HostWait w) const { return counts_[static_cast<std::size_t>(w)]; }
  std::int64_t total() const {
    std::int64_t n = 0;
    for (std::int64_t c : counts_) n += c;
    return n;
  }

 private:
  Counts counts_{};
};

inline void note_host_wait(HostWait w) { HostWaits::instance().note(w); }

// Seconds the host has spent blocked waiting for other ranks: the communication waits above
// (a request's wait, a blocking reduction of host values), timed by CommunicationWait. A rank's
// step time less this is its own work, which the straggler report compares across ranks
// (src/train/straggler_report.hpp). On NCCL the device waits for the peers, not the host:
// src/parallel/device_wait_clock.hpp adds the device's waits here once per log interval.
class CommunicationClock {
 public:
  static CommunicationClock& instance() {
    static CommunicationClock clock;
    return clock;
  }
  void add(double s) { seconds_ += s; }
  double seconds() const { return seconds_; }

 private:
  double seconds_ = 0;
};

// Counts the wait (note_host_wait) and times it for its lifetime.
class CommunicationWait {
 public:
  explicit CommunicationWait(HostWait w) : start_(std::chrono::steady_clock::now()) { note_host_wait(w); }
  ~CommunicationWait() {
    CommunicationClock::instance().add(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  CommunicationWait(const CommunicationWait&) = delete;
  CommunicationWait& operator=(const CommunicationWait&) = delete;

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tptrain::util
