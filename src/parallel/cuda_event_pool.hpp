// Reused CUDA events for stream ordering (the NCCL communicator records two per operation: the
// producer's point on the compute stream and the completion on the communication stream).
// Creating and destroying them per operation costs host time in every collective; the pool
// creates an event only when none is free and then keeps it, so a step creates none once the
// first has run. An event may go back to the pool as soon as the call that consumes its
// recorded state has returned: cudaStreamWaitEvent captures the most recent record when it is
// called, later records do not change what that stream waits for (CUDA runtime API,
// cudaStreamWaitEvent), and after cudaEventSynchronize the event is complete.
// Built only with CUDA; one thread (the training loop) uses a pool.
#pragma once

#if defined(KOKKOS_ENABLE_CUDA)

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace tptrain::parallel {

class CudaEventPool {
 public:
  // `flags` of the events it creates: no timing by default (the ordering events); the straggler
  // report's clock (device_wait_clock.hpp) times its waits with cudaEventDefault.
  explicit CudaEventPool(unsigned flags = cudaEventDisableTiming) : flags_(flags) {}
  CudaEventPool(const CudaEventPool&) = delete;
  CudaEventPool& operator=(const CudaEventPool&) = delete;
  ~CudaEventPool() {
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }

  // A free event (created if there is none; by default timing off: the cheapest kind to record
  // and wait on).
  cudaEvent_t acquire() {
    if (!free_.empty()) {
      const cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    const cudaError_t rc = cudaEventCreateWithFlags(&e, flags_);
    if (rc != cudaSuccess) throw std::runtime_error(std::string("tptrain: cudaEventCreateWithFlags: ") + cudaGetErrorString(rc));
    ++created_;
    return e;
  }
  // `e` goes back: its recorded state has been consumed (see above).
  void release(cudaEvent_t e) { free_.push_back(e); }

  // Events created so far (steady state: no more).
  std::size_t created() const { return created_; }

 private:
  unsigned flags_;
  std::vector<cudaEvent_t> free_;
  std::size_t created_ = 0;
};

}  // namespace tptrain::parallel

#endif
