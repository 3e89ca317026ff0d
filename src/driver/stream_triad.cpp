#include "src/driver/stream_triad.hpp"

#include <chrono>

#include "kokkos_kernels/views.hpp"

namespace tptrain::driver {

double measure_triad_bytes_per_s(std::int64_t elements, double min_seconds, int min_runs) {
  const kx::ExecSpace exec;
  using Policy = Kokkos::RangePolicy<kx::ExecSpace, Kokkos::IndexType<std::int64_t>>;
  kernels::Vector<double> a("triad.a", elements), b("triad.b", elements), c("triad.c", elements);
  Kokkos::parallel_for(
      "tptrain::triad::fill", Policy(exec, 0, elements), KOKKOS_LAMBDA(const std::int64_t i) {
        b(i) = 1.0 + 1e-9 * double(i % 1000);
        c(i) = 2.0;
      });
  const double s = 3.0;
  const auto triad = [&] {
    Kokkos::parallel_for(
        "tptrain::triad", Policy(exec, 0, elements), KOKKOS_LAMBDA(const std::int64_t i) { a(i) = b(i) + s * c(i); });
    exec.fence();
  };
  triad();  // untimed: first touch of a
  const double bytes = 3.0 * sizeof(double) * double(elements);
  double best = 0.0, total = 0.0;
  for (int run = 0; run < min_runs || total < min_seconds; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    triad();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += dt;
    if (dt > 0 && bytes / dt > best) best = bytes / dt;
  }
  return best;
}

}  // namespace tptrain::driver
