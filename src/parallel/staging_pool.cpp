#include "src/parallel/staging_pool.hpp"

#include "src/util/memory_category.hpp"

namespace tptrain::parallel {

std::shared_ptr<void> StagingPool::acquire(std::size_t bytes) {
  std::shared_ptr<Slot> pick;
  for (const auto& slot : slots_) {  // the smallest free buffer that fits
    if (slot->busy || slot->buffer.size() < bytes) continue;
    if (!pick || slot->buffer.size() < pick->buffer.size()) pick = slot;
  }
  if (!pick) {
    for (const auto& slot : slots_)  // else grow a free one rather than add another
      if (!slot->busy) {
        pick = slot;
        break;
      }
    if (!pick) pick = slots_.emplace_back(std::make_shared<Slot>());
    util::MemoryCategoryScope as(util::MemoryCategory::communication);
    pick->buffer = Kokkos::View<char*, kx::StagingSpace>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "tptrain::staging"), bytes);
    ++allocations_;
  }
  pick->busy = true;
  // The handle keeps the slot alive even if the pool goes first.
  return std::shared_ptr<void>(pick->buffer.data(), [pick](void*) { pick->busy = false; });
}

}  // namespace tptrain::parallel
