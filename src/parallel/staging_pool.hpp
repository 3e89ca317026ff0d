// Host buffers for a backend that needs host memory (MPI without device support) when the data
// lives on the device: reused from call to call instead of a fresh host mirror per collective.
// A buffer belongs to one pending operation at a time; the pool grows to the largest number of
// operations pending at once (e.g. one per data-parallel gradient bucket) and then allocates
// nothing more. On CUDA the buffers are pinned, so the copies to and from them are DMA.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kokkos_kernels/compat.hpp"

namespace tptrain::parallel {

class StagingPool {
 public:
  // A host buffer of at least `bytes`, the caller's until the returned handle is destroyed.
  std::shared_ptr<void> acquire(std::size_t bytes);
  // Buffers allocated so far (for tests: steady state allocates none).
  std::size_t allocations() const { return allocations_; }

 private:
  struct Slot {
    Kokkos::View<char*, kx::StagingSpace> buffer;
    bool busy = false;
  };
  std::vector<std::shared_ptr<Slot>> slots_;
  std::size_t allocations_ = 0;
};

}  // namespace tptrain::parallel
