// accumulate_loss_sum: the sum of the first `count` per-token losses added to a device double,
// against a double reference; several micro-batches accumulate; determinism; bad counts.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "catch.hpp"
#include "kokkos_kernels/loss_sum.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;

namespace {

using tptrain::kernels::test::TeamSizeGuard;

double read(const Kokkos::View<double, tptrain::kx::MemSpace>& total) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), total);
  return h();
}

}  // namespace

TEMPLATE_TEST_CASE("accumulate_loss_sum adds a prefix sum of the losses on the device",
                   "[kernels][loss_sum]", float, double) {
  using T = TestType;
  using Exec = tptrain::kx::ExecSpace;
  Exec exec;
  const int N = 1237;  // micro_batch · S, not a multiple of anything
  std::mt19937 rng(17);
  const auto h1 = tt::random_vec<T>(rng, N, 0.5, 11.0);  // losses are positive, ~log V
  const auto h2 = tt::random_vec<T>(rng, N, 0.5, 11.0);
  auto l1 = tt::to_device<T>(h1), l2 = tt::to_device<T>(h2);
  const std::int64_t count2 = 1000;  // an evaluation's last window: only `count` tokens are real
  double ref = 0;
  for (int i = 0; i < N; ++i) ref += h1[static_cast<std::size_t>(i)];
  for (std::int64_t i = 0; i < count2; ++i) ref += h2[static_cast<std::size_t>(i)];

  for (const int ts : tt::team_sizes(exec)) {
    INFO("team size " << ts);
    const TeamSizeGuard guard(ts);
    Kokkos::View<double, tptrain::kx::MemSpace> total("total");
    Kokkos::deep_copy(exec, total, 0.0);
    tk::accumulate_loss_sum(exec, l1, N, total);
    tk::accumulate_loss_sum(exec, l2, count2, total);
    tk::accumulate_loss_sum(exec, l2, 0, total);  // nothing to add
    const double got = read(total);
    CHECK(std::fabs(got - ref) < 1e-14 * ref);  // double accumulation of float losses
    // Deterministic for a fixed team size.
    Kokkos::deep_copy(exec, total, 0.0);
    tk::accumulate_loss_sum(exec, l1, N, total);
    tk::accumulate_loss_sum(exec, l2, count2, total);
    CHECK(read(total) == got);
  }

  Kokkos::View<double, tptrain::kx::MemSpace> total("total");
  CHECK_THROWS_AS(tk::accumulate_loss_sum(exec, l1, N + 1, total), std::invalid_argument);
  CHECK_THROWS_AS(tk::accumulate_loss_sum(exec, l1, -1, total), std::invalid_argument);
  CHECK(read(total) == 0.0);
}
