// What an allocation is for, as the memory ledger (util/memory_ledger.hpp) books it: the code
// that allocates says so with a MemoryCategoryScope around the allocation, e.g.
//   util::MemoryCategoryScope as(util::MemoryCategory::activations);
// Light on purpose (no ledger, no Kokkos): the model's headers include it.
#pragma once

namespace tptrain::util {

enum class MemoryCategory : int {
  weights,          // the parameters the model computes with (Parameter::value)
  gradients,        // fp32 gradient buckets (GradBucket::flat)
  optimizer_state,  // AdamW moments; the fp32 master weights in bf16/fp16 (Megatron counts them there)
  activations,      // saved for the backward (every activation slot), stage tensors
  workspace,        // scratch shared by the layers of a stage, valid inside one forward/backward
  communication,    // host staging buffers of collectives and transfers
  checkpoint,       // host copies of the tensors being written or read
  other,            // every allocation outside a scope (batches, small bookkeeping, Kokkos itself)
};
inline constexpr int kMemoryCategoryCount = static_cast<int>(MemoryCategory::other) + 1;

// The category's name as it appears in logs and JSON fields: "weights", "optimizer_state", ...
const char* memory_category_name(MemoryCategory c);

// Allocations made by this thread while the scope lives are booked under `c`; scopes nest (the
// innermost wins) and the previous category comes back when the scope ends.
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory c);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;
  // Allocations from here on, until the scope ends or the next change, are booked under `c`
  // (several buffers of different categories allocated one after the other).
  void change(MemoryCategory c);

 private:
  MemoryCategory previous_;
};

// The category allocations of this thread are booked under now.
MemoryCategory current_memory_category();

}  // namespace tptrain::util
