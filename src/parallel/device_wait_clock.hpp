// The device's waits for other ranks on NCCL, for the straggler report
// (src/train/straggler_report.hpp; docs/design.md, "Run outputs").
//
// On the MPI backend a rank waits for its peers on the host (a request's wait, a blocking
// reduction), timed by util::CommunicationWait. On NCCL the host only enqueues: the device
// waits, where a consumer stream waits for a collective's completion event (Request::wait_on,
// src/parallel/nccl_communicator.cpp). While the clock is on, two timing events bracket that wait
// on the consumer's stream; the time between them is how long the stream stood still for the
// collective -- the other ranks and the transfer, as a host wait is on MPI. Once per log
// interval, with the device fenced (every pair complete), collect_device_waits() adds their sum
// to util::CommunicationClock, so that a rank's own work per step is the same figure on both
// backends. Off (the default: eval, generate, bench never collect), the wait is the plain
// cudaStreamWaitEvent and records nothing.
//
// One thread (the training loop) uses it; its events come from a pool of its own.
#pragma once

#include <Kokkos_Macros.hpp>

#include "src/util/host_waits.hpp"

#if defined(KOKKOS_ENABLE_CUDA)

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "src/parallel/cuda_event_pool.hpp"

namespace tptrain::parallel {

class DeviceWaitClock {
 public:
  static DeviceWaitClock& instance() {
    static DeviceWaitClock clock;
    return clock;
  }
  void turn_on() { on_ = true; }

  // Makes `stream` wait for `done`, timed while the clock is on.
  void wait(cudaStream_t stream, cudaEvent_t done) {
    if (!on_) {
      check(cudaStreamWaitEvent(stream, done, 0), "cudaStreamWaitEvent");
      return;
    }
    const cudaEvent_t begin = events_.acquire(), end = events_.acquire();
    check(cudaEventRecord(begin, stream), "cudaEventRecord");
    check(cudaStreamWaitEvent(stream, done, 0), "cudaStreamWaitEvent");
    check(cudaEventRecord(end, stream), "cudaEventRecord");
    pending_.emplace_back(begin, end);
  }

  // Adds the seconds of the waits recorded since the last call to util::CommunicationClock and
  // returns them. The device must have passed them (the caller fenced it).
  double collect() {
    double seconds = 0;
    for (const auto& [begin, end] : pending_) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
      seconds += static_cast<double>(ms) * 1e-3;
      events_.release(begin);
      events_.release(end);
    }
    pending_.clear();
    util::CommunicationClock::instance().add(seconds);
    return seconds;
  }

 private:
  DeviceWaitClock() = default;
  static void check(cudaError_t rc, const char* call) {
    if (rc != cudaSuccess) throw std::runtime_error(std::string("tptrain: ") + call + ": " + cudaGetErrorString(rc));
  }
  bool on_ = false;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> pending_;
  CudaEventPool events_{cudaEventDefault};  // with timing, unlike the ordering events
};

inline void time_device_waits() { DeviceWaitClock::instance().turn_on(); }
inline void collect_device_waits() { DeviceWaitClock::instance().collect(); }

}  // namespace tptrain::parallel

#else

namespace tptrain::parallel {
// Without CUDA every wait for another rank is the host's, timed where it happens.
inline void time_device_waits() {}
inline void collect_device_waits() {}
}  // namespace tptrain::parallel

#endif
