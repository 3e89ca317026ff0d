#include "src/driver/stream_triad.hpp"

#include "kokkos_kernels/views.hpp"
#include "src/driver/run_rate.hpp"

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
  return rate_of_runs(bytes, min_runs, min_seconds, RunStatistic::best, triad);
}

}  // namespace tptrain::driver
