// The rate calibrate reports for a measurement: units / seconds of the fastest of at least
// `min_runs` runs of `pass` that together take at least `min_seconds` (the fastest run is the one
// least disturbed by other work on the node). `pass` fences its own work.
#pragma once

#include <chrono>

namespace tptrain::driver {

// `prepare` runs untimed before each pass (and fences its own work).
template <class Pass, class Prepare>
double best_rate(double units, int min_runs, double min_seconds, Pass&& pass, Prepare&& prepare) {
  double best = 0.0, total = 0.0;
  for (int run = 0; run < min_runs || total < min_seconds; ++run) {
    prepare();
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += dt;
    if (dt > 0 && units / dt > best) best = units / dt;
  }
  return best;
}

template <class Pass>
double best_rate(double units, int min_runs, double min_seconds, Pass&& pass) {
  return best_rate(units, min_runs, min_seconds, pass, [] {});
}

}  // namespace tptrain::driver
