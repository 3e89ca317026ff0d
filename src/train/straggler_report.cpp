#include "src/train/straggler_report.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/mpi_check.hpp"
#include "src/parallel/device_binding.hpp"

namespace tptrain::train {

StragglerReport::StragglerReport(MPI_Comm world, double factor, int intervals, int gpu)
    : world_(world), factor_(factor), intervals_(intervals) {
  hosts_ = parallel::host_names(world);
  gpus_.resize(hosts_.size());
  TPTRAIN_MPI_CHECK(MPI_Allgather(&gpu, 1, MPI_INT, gpus_.data(), 1, MPI_INT, world));
}

StepTimes StragglerReport::of(const std::vector<double>& times) {
  StepTimes t;
  if (times.empty()) return t;
  t.max_rank = static_cast<int>(std::max_element(times.begin(), times.end()) - times.begin());
  t.max_s = times[static_cast<std::size_t>(t.max_rank)];
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  t.median_s = n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  return t;
}

StepTimes StragglerReport::gather(double step_s) {
  std::vector<double> times(hosts_.size());
  TPTRAIN_MPI_CHECK(MPI_Allgather(&step_s, 1, MPI_DOUBLE, times.data(), 1, MPI_DOUBLE, world_));
  return of(times);
}

std::string StragglerReport::where(int rank) const {
  const std::size_t r = static_cast<std::size_t>(rank);
  if (r >= hosts_.size()) return "unknown";
  if (gpus_[r] < 0) return fmt::format("host {}, no GPU", hosts_[r]);
  return fmt::format("host {}, GPU {}", hosts_[r], gpus_[r]);
}

std::string StragglerReport::warning(const StepTimes& t) {
  const bool slow = hosts_.size() > 1 && t.median_s > 0 && t.max_s > factor_ * t.median_s;
  if (!slow || t.max_rank != slow_rank_) {
    slow_rank_ = slow ? t.max_rank : -1;
    slow_count_ = slow ? 1 : 0;
    warned_ = false;
  } else {
    ++slow_count_;
  }
  if (!slow || warned_ || slow_count_ < intervals_) return {};
  warned_ = true;
  return fmt::format("rank {} ({}) is a straggler: {:.4f} s of its own work per step against a median of {:.4f} s "
                     "({:.1f}x) for {} log intervals in a row (training.straggler_factor = {:g}, "
                     "training.straggler_intervals = {}); the other ranks wait for it at every step",
                     t.max_rank, where(t.max_rank), t.max_s, t.median_s, t.max_s / t.median_s, slow_count_, factor_,
                     intervals_);
}

}  // namespace tptrain::train
