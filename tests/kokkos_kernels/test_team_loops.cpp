// detail::team_for and detail::team_sum (kokkos_kernels/detail.hpp), the team loops the host
// backends vectorise: every index of [begin, end) visited once and nothing outside it, and the
// sum equal, bit for bit, to the plain sum in index order, for ranges shorter and longer than
// team_sum's 16-term blocks, with and without a remainder. One team per (begin, end) pair; on a
// GPU the team's threads share the range (Kokkos' TeamThreadRange), whose sum may be in another
// order, so there it is compared with a tolerance. With several threads per team on host
// backends (tt::team_sizes) the Kokkos path runs too.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "catch.hpp"
#include "kokkos_kernels/detail.hpp"
#include "test_util.hpp"

namespace tk = tptrain::kernels;
namespace tt = tptrain::kernels::test;
namespace kx = tptrain::kx;

TEST_CASE("team_for visits [begin, end) once; team_sum adds f(begin..end-1) in order", "[kernels]") {
  using Exec = kx::ExecSpace;
  Exec exec;
  constexpr int width = 53;  // a row: blocks of 16, a remainder, ranges starting inside a block
  std::mt19937 rng(2026);
  const std::vector<double> hx = tt::random_vec<float>(rng, width, -2.0, 2.0);
  Kokkos::View<float*, kx::MemSpace> x("x", width);
  {
    auto h = Kokkos::create_mirror_view(x);
    for (int j = 0; j < width; ++j) h(j) = static_cast<float>(hx[j]);
    Kokkos::deep_copy(x, h);
  }
  // Every (begin, end) with 0 <= begin <= end <= width: one team each.
  std::vector<std::pair<int, int>> ranges;
  for (int b = 0; b <= width; b += 3)
    for (int e = b; e <= width; ++e) ranges.emplace_back(b, e);
  const auto nteams = static_cast<std::int64_t>(ranges.size());
  Kokkos::View<int*, kx::MemSpace> begin("begin", nteams), end("end", nteams);
  {
    auto hb = Kokkos::create_mirror_view(begin);
    auto he = Kokkos::create_mirror_view(end);
    for (std::int64_t t = 0; t < nteams; ++t) {
      hb(t) = ranges[t].first;
      he(t) = ranges[t].second;
    }
    Kokkos::deep_copy(begin, hb);
    Kokkos::deep_copy(end, he);
  }
  for (const int team_size : tt::team_sizes(exec)) {
    INFO("threads per team: " << team_size);
    tt::TeamSizeGuard guard(team_size);
    Kokkos::View<int**, kx::MemSpace> visits("visits", nteams, width);
    Kokkos::View<float*, kx::MemSpace> sums("sums", nteams);
    using member = typename tk::detail::Teams<Exec>::member_type;
    Kokkos::parallel_for(
        "test_team_loops", tk::detail::teams(exec, nteams, "test_team_loops"), KOKKOS_LAMBDA(const member& team) {
          const std::int64_t t = team.league_rank();
          tk::detail::team_for<Exec>(team, begin(t), end(t), [&](const std::int64_t j) { visits(t, j) += 1; });
          const float s = tk::detail::team_sum<Exec, float>(team, begin(t), end(t),
                                                            [&](const std::int64_t j) { return x(j) * x(j); });
          Kokkos::single(Kokkos::PerTeam(team), [&]() { sums(t) = s; });
        });
    auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), visits);
    auto hs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), sums);
    const bool one_thread = Kokkos::SpaceAccessibility<Kokkos::HostSpace, kx::MemSpace>::accessible && team_size == 1;
    int wrong_visits = 0, wrong_sums = 0;
    for (std::int64_t t = 0; t < nteams; ++t) {
      const int b = ranges[t].first, e = ranges[t].second;
      for (int j = 0; j < width; ++j) wrong_visits += hv(t, j) != (j >= b && j < e ? 1 : 0);
      float ref = 0;  // in index order, in float, as the kernel's f computes it
      for (int j = b; j < e; ++j) ref += static_cast<float>(hx[j]) * static_cast<float>(hx[j]);
      const bool same = one_thread ? hs(t) == ref : std::fabs(hs(t) - ref) <= 1e-5f * (1.0f + ref);
      wrong_sums += !same;
    }
    CHECK(wrong_visits == 0);
    CHECK(wrong_sums == 0);
  }
}
