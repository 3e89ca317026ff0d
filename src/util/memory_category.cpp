#include "src/util/memory_category.hpp"

namespace tptrain::util {

namespace {
// Per thread: an allocation is booked under the scope of the thread that makes it.
thread_local MemoryCategory t_category = MemoryCategory::other;
}  // namespace

const char* memory_category_name(MemoryCategory c) {
  static constexpr const char* names[kMemoryCategoryCount] = {
      "weights", "gradients", "optimizer_state", "activations", "workspace", "communication", "checkpoint", "other"};
  return names[static_cast<int>(c)];
}

MemoryCategoryScope::MemoryCategoryScope(MemoryCategory c) : previous_(t_category) { t_category = c; }
MemoryCategoryScope::~MemoryCategoryScope() { t_category = previous_; }
void MemoryCategoryScope::change(MemoryCategory c) { t_category = c; }

MemoryCategory current_memory_category() { return t_category; }

}  // namespace tptrain::util
