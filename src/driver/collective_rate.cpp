#include "src/driver/collective_rate.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "base/mpi_check.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/precision.hpp"
#include "src/driver/rank_mean.hpp"
#include "src/parallel/collectives.hpp"

namespace tptrain::driver {

// `iterations` dependent multiply-adds on each element of x: a kernel whose time scales with
// them, busy on the compute instance while a collective is in flight.
// (A named function, not a lambda: nvcc takes no extended lambda inside a lambda.)
void run_collective_rate_kernel(const kx::ExecSpace& exec, const Kokkos::View<float*, kx::MemSpace>& x,
                                int iterations) {
  Kokkos::parallel_for(
      "tptrain::collective_rate::kernel", Kokkos::RangePolicy<kx::ExecSpace>(exec, 0, x.extent(0)),
      KOKKOS_LAMBDA(const std::size_t i) {
        float v = x(i);
        for (int k = 0; k < iterations; ++k) v = v * 0.999f + 0.001f;
        x(i) = v;
      });
}

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

template <class T>
CollectiveRate measure_collective_rate(MPI_Comm comm, std::int64_t elements, double latency_s, int reps) {
  int size = 1;
  TPTRAIN_MPI_CHECK(MPI_Comm_size(comm, &size));
  CollectiveRate out;
  if (size < 2) return out;
  MPI_Comm own = MPI_COMM_NULL;
  TPTRAIN_MPI_CHECK(MPI_Comm_dup(comm, &own));
  const std::unique_ptr<parallel::Communicator> group = parallel::make_communicator(own);
  out.backend = group->backend_name();
  const kx::ExecSpace exec;
  // Zeros: sums of them stay finite in every precision however many times they run.
  const Kokkos::View<T*, kx::MemSpace> buffer("collective_rate.buffer", std::size_t(std::max<std::int64_t>(1, elements)));
  const Kokkos::View<float*, kx::MemSpace> x("collective_rate.kernel", std::size_t(1) << 16);
  int iterations = 64;
  const auto all_reduce = [&] { parallel::iall_reduce(*group, exec, buffer, parallel::ReduceOp::sum).wait_on(exec); };
  const auto kernel = [&] { run_collective_rate_kernel(exec, x, iterations); };
  const auto together = [&] {
    parallel::Request r = parallel::iall_reduce(*group, exec, buffer, parallel::ReduceOp::sum);
    run_collective_rate_kernel(exec, x, iterations);
    r.wait_on(exec);
  };
  // Seconds of `what` on this rank, fenced, the ranks started together.
  const auto timed = [&](auto&& what) {
    TPTRAIN_MPI_CHECK(MPI_Barrier(comm));
    const auto t0 = std::chrono::steady_clock::now();
    what();
    kx::fence(exec, "tptrain::collective_rate");
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const auto median_of = [&](auto&& what) {
    std::vector<double> t;
    for (int r = 0; r < reps; ++r) t.push_back(timed(what));
    return mean_over(comm, median(t));
  };
  for (int r = 0; r < 3; ++r) timed(all_reduce);  // untimed: buffers registered, paths set up
  out.all_reduce_s = median_of(all_reduce);
  // The kernel at least twice the all-reduce (and a millisecond): its iterations scaled to it.
  const double target = std::max(2.0 * out.all_reduce_s, 1e-3);
  out.kernel_s = median_of(kernel);
  for (int scaling = 0; scaling < 4 && out.kernel_s < 0.9 * target && iterations < 10000000; ++scaling) {
    iterations = int(std::clamp(double(iterations) * target / std::max(out.kernel_s, 1e-7), 1.0, 1e7));
    out.kernel_s = median_of(kernel);
  }
  out.together_s = median_of(together);
  const double k = double(size), bytes = double(sizeof(T)) * double(buffer.size());
  // The latencies taken out, but never more than half the time (a latency measured high).
  const double wire_s = std::max(out.all_reduce_s - 2.0 * (k - 1) * latency_s, 0.5 * out.all_reduce_s);
  out.bus_bandwidth_gbs = 2.0 * (k - 1) / k * bytes / wire_s / 1e9;
  out.host_share = std::clamp((out.together_s - out.kernel_s) / out.all_reduce_s, 0.0, 1.0);
  return out;
}

template CollectiveRate measure_collective_rate<float>(MPI_Comm, std::int64_t, double, int);
template CollectiveRate measure_collective_rate<kx::bf16>(MPI_Comm, std::int64_t, double, int);
template CollectiveRate measure_collective_rate<kx::fp16>(MPI_Comm, std::int64_t, double, int);

}  // namespace tptrain::driver
