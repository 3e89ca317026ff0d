#include "src/driver/kernel_overhead.hpp"

#include <algorithm>
#include <chrono>

#include "kokkos_kernels/views.hpp"

namespace tptrain::driver {

double measure_kernel_overhead_us(int launches, int trials) {
  const kx::ExecSpace exec;
  kernels::Vector<float> x("kernel_overhead.x", 1);
  const auto batch = [&] {
    for (int i = 0; i < launches; ++i)
      Kokkos::parallel_for(
          "tptrain::kernel_overhead", Kokkos::RangePolicy<kx::ExecSpace>(exec, 0, 1),
          KOKKOS_LAMBDA(const int j) { x(j) += 1.0f; });
    exec.fence();
  };
  batch();  // untimed: the first launch's set-up
  double best = 1e30;
  for (int t = 0; t < trials; ++t) {
    const auto t0 = std::chrono::steady_clock::now();
    batch();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best / launches * 1e6;
}

}  // namespace tptrain::driver
