// What the planner derives from one stage's 1F1B (interleaved) schedule, kept by (stage,
// pipeline, virtual stages, micro-batches): `plan --search` asks thousands of layouts that share
// a handful of schedules, and building a schedule's ops is most of a small layout's time.
#pragma once

#include <array>
#include <cstddef>
#include <map>

namespace tptrain::plan {

// make() for the schedule `key` = {stage, pipeline, virtual stages, micro-batches}, made once per
// thread and call site (each Make is its own cache), emptied beyond kCachedSchedules entries so
// that it stays bounded. Returned by value: a later call may empty the cache.
template <class Make>
auto per_schedule(const std::array<int, 4>& key, Make make) -> decltype(make()) {
  constexpr std::size_t kCachedSchedules = 4096;
  thread_local std::map<std::array<int, 4>, decltype(make())> cache;
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= kCachedSchedules) cache.clear();
  return cache.emplace(key, make()).first->second;
}

}  // namespace tptrain::plan
