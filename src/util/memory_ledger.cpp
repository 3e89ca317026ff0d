#include "src/util/memory_ledger.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>

namespace tptrain::util {

namespace {

// The callbacks that were installed before the ledger's (a Kokkos Tools library), called after it.
Kokkos::Tools::allocateDataFunction g_previous_allocate = nullptr;
Kokkos::Tools::deallocateDataFunction g_previous_deallocate = nullptr;

void on_allocate(const Kokkos::Tools::SpaceHandle space, const char* label, const void* ptr, const std::uint64_t bytes) {
  memory_ledger().allocated(space.name, ptr, bytes, current_memory_category());
  if (g_previous_allocate != nullptr) g_previous_allocate(space, label, ptr, bytes);
}

void on_deallocate(const Kokkos::Tools::SpaceHandle space, const char* label, const void* ptr,
                   const std::uint64_t bytes) {
  memory_ledger().deallocated(ptr);
  if (g_previous_deallocate != nullptr) g_previous_deallocate(space, label, ptr, bytes);
}

std::size_t idx(MemoryCategory c) { return static_cast<std::size_t>(c); }

}  // namespace

MemoryLedger& memory_ledger() {
  // Never destroyed: Kokkos may release memory during static destruction, after a static
  // ledger would be gone.
  static MemoryLedger* ledger = new MemoryLedger;
  return *ledger;
}

void MemoryLedger::install() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (installed_) return;
    installed_ = true;
  }
  const auto previous = Kokkos::Tools::Experimental::get_callbacks();
  g_previous_allocate = previous.allocate_data;
  g_previous_deallocate = previous.deallocate_data;
  Kokkos::Tools::Experimental::set_allocate_data_callback(on_allocate);
  Kokkos::Tools::Experimental::set_deallocate_data_callback(on_deallocate);
}

bool MemoryLedger::installed() const {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!installed_) return false;
  }
  // Someone may have replaced the callbacks since (see the header).
  const auto now = Kokkos::Tools::Experimental::get_callbacks();
  return now.allocate_data == on_allocate && now.deallocate_data == on_deallocate;
}

int MemoryLedger::space_index(const char* name) {
  for (std::size_t i = 0; i < spaces_.size(); ++i)
    if (spaces_[i].name == name) return static_cast<int>(i);
  spaces_.push_back(SpaceUsage{name, 0, 0});
  return static_cast<int>(spaces_.size() - 1);
}

void MemoryLedger::allocated(const char* space, const void* ptr, std::uint64_t bytes, MemoryCategory c) {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto n = static_cast<std::size_t>(bytes);
  const int s = space_index(space);
  const auto [it, fresh] = live_.try_emplace(ptr, Live{c, s, n});
  if (!fresh) {  // an address Kokkos reuses without having told us of its release: the old block is gone
    usage_.current[idx(it->second.category)] -= it->second.bytes;
    usage_.total -= it->second.bytes;
    spaces_[static_cast<std::size_t>(it->second.space)].current -= it->second.bytes;
    it->second = Live{c, s, n};
  }
  std::size_t& cat = usage_.current[idx(c)];
  cat += n;
  usage_.high_water[idx(c)] = std::max(usage_.high_water[idx(c)], cat);
  usage_.total += n;
  usage_.total_high_water = std::max(usage_.total_high_water, usage_.total);
  SpaceUsage& sp = spaces_[static_cast<std::size_t>(s)];
  sp.current += n;
  sp.high_water = std::max(sp.high_water, sp.current);
}

void MemoryLedger::deallocated(const void* ptr) {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = live_.find(ptr);
  if (it == live_.end()) return;  // allocated before install()
  usage_.current[idx(it->second.category)] -= it->second.bytes;
  usage_.total -= it->second.bytes;
  spaces_[static_cast<std::size_t>(it->second.space)].current -= it->second.bytes;
  live_.erase(it);
}

std::size_t MemoryLedger::current(MemoryCategory c) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return usage_.current[idx(c)];
}

std::size_t MemoryLedger::high_water(MemoryCategory c) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return usage_.high_water[idx(c)];
}

std::size_t MemoryLedger::total() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return usage_.total;
}

std::size_t MemoryLedger::high_water() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return usage_.total_high_water;
}

MemoryUsage MemoryLedger::usage() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return usage_;
}

std::vector<SpaceUsage> MemoryLedger::spaces() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return spaces_;
}

void MemoryLedger::reset_high_water() {
  const std::lock_guard<std::mutex> lock(mutex_);
  usage_.high_water = usage_.current;
  usage_.total_high_water = usage_.total;
  for (SpaceUsage& s : spaces_) s.high_water = s.current;
}

}  // namespace tptrain::util
