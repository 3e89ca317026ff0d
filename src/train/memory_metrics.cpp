#include "src/train/memory_metrics.hpp"

#include <fmt/format.h>

#include "base/mpi_check.hpp"
#include "src/util/memory_ledger.hpp"
#include "src/util/resident_memory.hpp"

namespace tptrain::train {

using util::MemoryCategory;

namespace {
std::int64_t signed_bytes(std::size_t n) { return static_cast<std::int64_t>(n); }
double mib(std::size_t n) { return static_cast<double>(n) / (1 << 20); }
}  // namespace

NamedBytes measured_memory_fields(MPI_Comm world, bool category_peaks) {
  const util::MemoryUsage u = util::memory_ledger().usage();
  const util::ResidentMemory rss = util::resident_memory();
  std::int64_t peaks[2] = {signed_bytes(u.total_high_water), signed_bytes(rss.peak)};
  TPTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, peaks, 2, MPI_INT64_T, MPI_MAX, world));
  NamedBytes fields;
  for (int c = 0; c < util::kMemoryCategoryCount; ++c) {
    const auto cat = static_cast<MemoryCategory>(c);
    fields.emplace_back(fmt::format("mem_{}_bytes", util::memory_category_name(cat)), signed_bytes(u[cat]));
  }
  if (category_peaks)
    for (int c = 0; c < util::kMemoryCategoryCount; ++c) {
      const auto cat = static_cast<MemoryCategory>(c);
      fields.emplace_back(fmt::format("mem_{}_peak_bytes", util::memory_category_name(cat)), signed_bytes(u.peak(cat)));
    }
  fields.emplace_back("mem_peak_bytes", signed_bytes(u.total_high_water));
  fields.emplace_back("mem_peak_bytes_max_rank", peaks[0]);
  fields.emplace_back("mem_rss_bytes", signed_bytes(rss.current));
  fields.emplace_back("mem_peak_rss_bytes", signed_bytes(rss.peak));
  fields.emplace_back("mem_peak_rss_bytes_max_rank", peaks[1]);
  return fields;
}

std::string measured_memory_summary() {
  const util::MemoryUsage u = util::memory_ledger().usage();
  const util::ResidentMemory rss = util::resident_memory();
  std::string categories;
  for (int c = 0; c < util::kMemoryCategoryCount; ++c) {
    const auto cat = static_cast<MemoryCategory>(c);
    categories += fmt::format("{}{} {:.2f}", c ? ", " : "", util::memory_category_name(cat), mib(u[cat]));
    if (u.peak(cat) > u[cat]) categories += fmt::format(" (peak {:.2f})", mib(u.peak(cat)));
  }
  std::string spaces;
  if (const auto all = util::memory_ledger().spaces(); all.size() > 1)
    for (const util::SpaceUsage& s : all)
      spaces += fmt::format("{}{} {:.2f} (peak {:.2f})", spaces.empty() ? "; by memory space, MiB: " : ", ", s.name,
                            mib(s.current), mib(s.high_water));
  return fmt::format("measured Kokkos allocations of this rank: {:.2f} MiB, peak {:.2f} MiB; by category, MiB: {}{}; "
                     "resident set {:.1f} MiB, peak {:.1f} MiB",
                     mib(u.total), mib(u.total_high_water), categories, spaces, mib(rss.current), mib(rss.peak));
}

}  // namespace tptrain::train
