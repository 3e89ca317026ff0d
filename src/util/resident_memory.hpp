// The process's resident set as the operating system counts it: everything the ledger
// (util/memory_ledger.hpp) cannot see on the host (std::vector data, MPI and BLAS buffers, the
// token file) is in it. On a GPU it does not include device memory.
#pragma once

#include <cstddef>

namespace tptrain::util {

struct ResidentMemory {
  std::size_t current = 0;  // bytes resident now (Linux VmRSS; 0 where unknown)
  std::size_t peak = 0;     // the largest resident set so far (VmHWM, else getrusage's ru_maxrss)
};

ResidentMemory resident_memory();

}  // namespace tptrain::util
