// What this process has allocated, measured rather than computed: every Kokkos allocation is
// reported by Kokkos Tools' allocate/deallocate callbacks, and the ledger books its bytes under
// the MemoryCategory of the innermost MemoryCategoryScope open on the allocating thread ("other"
// when none is). It keeps the bytes live now and the high-water mark of each category and of
// the total, so that peaks between two reports (a checkpoint's host copies, a pipeline's stored
// inputs growing in step 1) are not missed. docs/design.md, "Memory accounting", says what each
// category holds.
//
// The categories are Megatron's / ZeRO's (Rajbhandari et al. 2020): weights the model computes
// with, gradients, optimizer state (AdamW moments and, in mixed precision, the fp32 master
// weights), activations; plus workspace (scratch valid inside one layer), communication buffers,
// checkpoint staging and other.
//
// Bytes are what Kokkos reports: a View's span times its element size, rounded up to a
// multiple of 8. Memory that does not come from Kokkos (std::vector, MPI and NCCL internals,
// the cuBLAS workspace, the data set on the host) is not in the ledger; the resident set size
// (util/resident_memory.hpp) covers the host side of it.
//
// Kokkos Tools: the ledger chains to callbacks installed before it (a tool library loaded
// through KOKKOS_TOOLS_LIBS still sees every allocation). Code that sets other Kokkos Tools
// callbacks must set them one by one (set_begin_parallel_for_callback, ...), never replace the
// whole EventSet (set_callbacks), which would drop the ledger's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/util/memory_category.hpp"

namespace tptrain::util {

// A consistent copy of the ledger's counters (bytes).
struct MemoryUsage {
  std::array<std::size_t, kMemoryCategoryCount> current{};     // live now, by category
  std::array<std::size_t, kMemoryCategoryCount> high_water{};  // each category's own peak
  std::size_t total = 0;             // live now, all categories
  std::size_t total_high_water = 0;  // peak of the total (not the sum of the categories' peaks)
  std::size_t operator[](MemoryCategory c) const { return current[static_cast<std::size_t>(c)]; }
  std::size_t peak(MemoryCategory c) const { return high_water[static_cast<std::size_t>(c)]; }
};

// Live bytes and peak of one Kokkos memory space ("Host", "Cuda", "CudaHostPinned", ...): on a
// GPU the device space is what fills up, the categories add up every space.
struct SpaceUsage {
  std::string name;
  std::size_t current = 0, high_water = 0;
};

class MemoryLedger {
 public:
  // Starts booking Kokkos allocations: call once right after Kokkos::initialize (the drivers
  // and the test main do); again is harmless. Allocations from before are not known, and their
  // deallocation is ignored.
  void install();
  // Installed, and its callbacks are still the ones Kokkos calls (not replaced since).
  bool installed() const;

  std::size_t current(MemoryCategory c) const;
  std::size_t high_water(MemoryCategory c) const;
  std::size_t total() const;
  std::size_t high_water() const;  // of the total
  MemoryUsage usage() const;
  std::vector<SpaceUsage> spaces() const;
  // Every high-water mark (categories, total, spaces) becomes the current value: what follows
  // measures its own peak (e.g. one training step under a recompute mode).
  void reset_high_water();

  // What the Kokkos Tools callbacks call; public for tests.
  void allocated(const char* space, const void* ptr, std::uint64_t bytes, MemoryCategory c);
  void deallocated(const void* ptr);

 private:
  struct Live {
    MemoryCategory category;
    int space;
    std::size_t bytes;
  };
  int space_index(const char* name);  // under mutex_

  mutable std::mutex mutex_;
  bool installed_ = false;
  MemoryUsage usage_;
  std::vector<SpaceUsage> spaces_;
  std::unordered_map<const void*, Live> live_;
};

// The process's ledger.
MemoryLedger& memory_ledger();

}  // namespace tptrain::util
