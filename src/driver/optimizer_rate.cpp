#include "src/driver/optimizer_rate.hpp"

#include "kokkos_kernels/adamw.hpp"
#include "kokkos_kernels/flat_segments.hpp"
#include "kokkos_kernels/precision.hpp"
#include "kokkos_kernels/reductions.hpp"
#include "kokkos_kernels/views.hpp"
#include "src/driver/run_rate.hpp"

namespace tptrain::driver {

// A backward's gradients, of order 1e-3 (no moment decays to a denormal however many steps run).
// (A named function, not a lambda: nvcc takes no extended lambda inside a lambda.)
void fill_optimizer_rate_gradients(const kx::ExecSpace& exec, const kernels::Vector<float>& g) {
  Kokkos::parallel_for(
      "tptrain::optimizer_rate::gradients",
      Kokkos::RangePolicy<kx::ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, std::int64_t(g.extent(0))),
      KOKKOS_LAMBDA(const std::int64_t i) { g(i) = 1e-3f * float(i % 13 - 6); });
  kx::fence(exec, "tptrain::optimizer_rate::gradients");
}

double measure_optimizer_bytes_per_s(std::int64_t parameters, double min_seconds, int min_runs) {
  const kx::ExecSpace exec;
  using Policy = Kokkos::RangePolicy<kx::ExecSpace, Kokkos::IndexType<std::int64_t>>;
  const std::int64_t n = parameters > 0 ? parameters : 1;
  kernels::Vector<float> w("optimizer_rate.w", n), g("optimizer_rate.g", n), m("optimizer_rate.m", n),
      v("optimizer_rate.v", n);
  const kernels::FlatSegments<kx::ExecSpace> bucket({kernels::FlatSegment{0, n, true}});
  Kokkos::View<double*, kx::ExecSpace::memory_space> norms("optimizer_rate.norms", 2);
  Kokkos::parallel_for(
      "tptrain::optimizer_rate::fill", Policy(exec, 0, n),
      KOKKOS_LAMBDA(const std::int64_t i) { w(i) = 0.01f * float(i % 17 - 8); });
  std::int64_t step = 0;
  const auto gradients = [&] { fill_optimizer_rate_gradients(exec, g); };  // untimed
  const auto pass = [&] {
    kernels::bucket_squared_norms(exec, g, bucket, norms);
    kernels::bucket_adamw_update(exec, w, g, m, v, bucket, 1e-4, 0.9, 0.95, 1e-8, 0.1, ++step);
    Kokkos::deep_copy(exec, g, 0.0f);
    kx::fence(exec, "tptrain::optimizer_rate");
  };
  gradients();
  pass();  // untimed: first touch
  return rate_of_runs(36.0 * double(n), min_runs, min_seconds, RunStatistic::median, pass, gradients);
}

}  // namespace tptrain::driver
