// LayerNorm over the feature dimension (PyTorch semantics: biased variance, eps inside sqrt):
//   mean = Σ_j x_j / H,  rstd = 1 / sqrt(Σ_j (x_j - mean)² / H + eps)
//   y_j = (x_j - mean) · rstd · γ_j + β_j
// Row statistics use one team per row (team reductions: deterministic for a fixed team size);
// dγ/dβ use one thread per column summing rows in order (no atomics, bitwise reproducible).
// Views: any layout, managed or unmanaged, subviews.
#pragma once

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

template <class Exec, class XV, class GV, class BV, class YV, class MV, class RV>
void layernorm_forward(const Exec& exec,
                       const XV& x,      // [N, H]
                       const GV& gamma,  // [H]
                       const BV& beta,   // [H]
                       const YV& y,      // [N, H] out (overwritten)
                       const MV& mean,   // [N] out, saved for backward
                       const RV& rstd,   // [N] out, saved for backward
                       const typename YV::non_const_value_type eps) {
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, GV, 1>();
  detail::check_view<Exec, BV, 1>();
  detail::check_view<Exec, YV, 2>();
  detail::check_view<Exec, MV, 1>();
  detail::check_view<Exec, RV, 1>();
  detail::check_writable<YV>();
  detail::check_writable<MV>();
  detail::check_writable<RV>();
  const std::int64_t n = x.extent(0);
  const std::int64_t h = x.extent(1);
  detail::require(
      y.extent(0) == static_cast<std::size_t>(n) && y.extent(1) == static_cast<std::size_t>(h) &&
          gamma.extent(0) == static_cast<std::size_t>(h) &&
          beta.extent(0) == static_cast<std::size_t>(h) &&
          mean.extent(0) == static_cast<std::size_t>(n) &&
          rstd.extent(0) == static_cast<std::size_t>(n),
      "layernorm_forward", "shapes must be x[N,H], gamma[H], beta[H], y[N,H], mean[N], rstd[N]");
  detail::require(h > 0, "layernorm_forward", "H must be positive");
  using T = typename YV::non_const_value_type;
  using member = typename detail::Teams<Exec>::member_type;
  Kokkos::parallel_for(
      "tptrain::kernels::layernorm_forward", detail::teams(exec, n, "layernorm_forward"),
      KOKKOS_LAMBDA(const member& team) {
        const std::int64_t i = team.league_rank();
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, h), [&](const std::int64_t j, T& acc) { acc += x(i, j); },
            sum);
        const T mu = sum / static_cast<T>(h);
        T sq = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, h),
            [&](const std::int64_t j, T& acc) {
              const T d = x(i, j) - mu;
              acc += d * d;
            },
            sq);
        const T rs = T(1) / kx::sqrt(sq / static_cast<T>(h) + eps);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, h), [&](const std::int64_t j) {
          y(i, j) = (x(i, j) - mu) * rs * gamma(j) + beta(j);
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          mean(i) = mu;
          rstd(i) = rs;
        });
      });
}

// x̂ = (x - mean) · rstd,  g = dy · γ
// dx = rstd · (g - mean_j(g) - x̂ · mean_j(g · x̂))   (overwritten)
// dγ += Σ_rows dy · x̂,  dβ += Σ_rows dy             (accumulated)
// dx may alias dy (an in-place backward); no other aliasing. CB: see detail::ColumnBlock.
template <class Exec, class DYV, class XV, class GV, class MV, class RV, class DXV, class DGV,
          class DBV, int CB = detail::ColumnBlock<Exec>::value>
void layernorm_backward(const Exec& exec,
                        const DYV& dy,       // [N, H]
                        const XV& x,         // [N, H] forward input
                        const GV& gamma,     // [H]
                        const MV& mean,      // [N] from layernorm_forward
                        const RV& rstd,      // [N] from layernorm_forward
                        const DXV& dx,       // [N, H] out (overwritten)
                        const DGV& dgamma,   // [H] accumulated
                        const DBV& dbeta) {  // [H] accumulated
  detail::check_view<Exec, DYV, 2>();
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, GV, 1>();
  detail::check_view<Exec, MV, 1>();
  detail::check_view<Exec, RV, 1>();
  detail::check_view<Exec, DXV, 2>();
  detail::check_view<Exec, DGV, 1>();
  detail::check_view<Exec, DBV, 1>();
  detail::check_writable<DXV>();
  detail::check_writable<DGV>();
  detail::check_writable<DBV>();
  const std::int64_t n = x.extent(0);
  const std::int64_t h = x.extent(1);
  const auto un = static_cast<std::size_t>(n);
  const auto uh = static_cast<std::size_t>(h);
  detail::require(dy.extent(0) == un && dy.extent(1) == uh && dx.extent(0) == un &&
                      dx.extent(1) == uh && gamma.extent(0) == uh && mean.extent(0) == un &&
                      rstd.extent(0) == un && dgamma.extent(0) == uh && dbeta.extent(0) == uh,
                  "layernorm_backward",
                  "shapes must be dy,x,dx[N,H], gamma,dgamma,dbeta[H], mean,rstd[N]");
  using T = typename DXV::non_const_value_type;
  using member = typename detail::Teams<Exec>::member_type;
  // Made before the first kernel: a refused row count must leave dgamma/dbeta untouched.
  const auto row_teams = detail::teams(exec, n, "layernorm_backward");
  // Parameter gradients first, so that dx may alias dy. One thread per block of CB columns,
  // rows summed in order (see detail::ColumnBlock).
  Kokkos::parallel_for(
      "tptrain::kernels::layernorm_backward_params", detail::range(exec, detail::ceil_div(h, CB)),
      KOKKOS_LAMBDA(const std::int64_t blk) {
        const std::int64_t j0 = blk * CB;
        const int nj = static_cast<int>(kx::min<std::int64_t>(CB, h - j0));
        T dg[CB], db[CB];
        for (int c = 0; c < CB; ++c) dg[c] = db[c] = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          const T mu = mean(i);
          const T rs = rstd(i);
          for (int c = 0; c < nj; ++c) {
            const T g = dy(i, j0 + c);
            dg[c] += g * ((x(i, j0 + c) - mu) * rs);
            db[c] += g;
          }
        }
        for (int c = 0; c < nj; ++c) {
          dgamma(j0 + c) += dg[c];
          dbeta(j0 + c) += db[c];
        }
      });
  Kokkos::parallel_for(
      "tptrain::kernels::layernorm_backward_input", row_teams,
      KOKKOS_LAMBDA(const member& team) {
        const std::int64_t i = team.league_rank();
        const T mu = mean(i);
        const T rs = rstd(i);
        T sum_g = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, h),
            [&](const std::int64_t j, T& acc) { acc += dy(i, j) * gamma(j); }, sum_g);
        T sum_gx = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, h),
            [&](const std::int64_t j, T& acc) {
              acc += dy(i, j) * gamma(j) * ((x(i, j) - mu) * rs);
            },
            sum_gx);
        const T mean_g = sum_g / static_cast<T>(h);
        const T mean_gx = sum_gx / static_cast<T>(h);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, h), [&](const std::int64_t j) {
          const T xhat = (x(i, j) - mu) * rs;
          dx(i, j) = rs * (dy(i, j) * gamma(j) - mean_g - xhat * mean_gx);
        });
      });
}

}  // namespace tptrain::kernels
