// The rate of a measurement over several runs of `pass` (at least `min_runs`, together at least
// `min_seconds`; `prepare` runs untimed before each, and each fences its own work):
//  - best: units / the fastest run's seconds: a peak, the run least disturbed by other work on
//    the node (bench's GEMM peak, STREAM's triad);
//  - median: units / the median run's seconds: what a run takes as a training step meets it, a
//    step's mean time being the sum of its kernels' typical ones (calibrate's rates, from which
//    `plan` predicts a step's time: on this project's shared virtual machine the median run of a
//    small GEMM is 5-17 % slower than the fastest, of the flash core and the norm kernels 8 %).
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace tptrain::driver {

enum class RunStatistic { best, median };

template <class Pass, class Prepare>
double rate_of_runs(double units, int min_runs, double min_seconds, RunStatistic statistic, Pass&& pass,
                    Prepare&& prepare) {
  std::vector<double> seconds;
  double total = 0.0;
  for (int run = 0; run < min_runs || total < min_seconds; ++run) {
    prepare();
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += dt;
    if (dt > 0) seconds.push_back(dt);
  }
  if (seconds.empty()) return 0.0;
  auto at = seconds.begin();
  if (statistic == RunStatistic::median) at += std::ptrdiff_t(seconds.size() / 2);
  std::nth_element(seconds.begin(), at, seconds.end());
  return units / *at;
}

template <class Pass>
double rate_of_runs(double units, int min_runs, double min_seconds, RunStatistic statistic, Pass&& pass) {
  return rate_of_runs(units, min_runs, min_seconds, statistic, pass, [] {});
}

}  // namespace tptrain::driver
