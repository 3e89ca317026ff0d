// RMSNorm over the feature dimension (Zhang & Sennrich 2019; Llama's LlamaRMSNorm):
//   rstd = 1 / sqrt(Σ_j x_j² / H + eps),   y_j = x_j · rstd · w_j
// and its backward, with x̂ = x · rstd and g = dy · w:
//   dx = rstd · (g − x̂ · mean_j(g · x̂)),   dw += Σ_rows dy · x̂.
// One team per row (team reductions: deterministic for a fixed team size); dw is a two-stage
// column sum (kokkos_kernels/column_sums.hpp): no atomics, bitwise reproducible.
// Precision: x, w, y, dy, dx may hold kx::bf16 / kx::fp16; the sums, rstd and each output value
// are computed in acc_t of the output (float for 16-bit) and rounded once when stored. Hugging
// Face's LlamaRMSNorm also normalises in fp32 and rounds x̂ to the storage type before the
// weight multiplies it; here x̂·w is one fp32 product, rounded once.
// rstd and dw are meant to be acc_t (float) views.
// Views: any layout, managed or unmanaged, subviews.
#pragma once

#include "kokkos_kernels/column_sums.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

namespace detail {

template <class Exec, class XV, class WV, class YV, class RV>
void check_rmsnorm(const XV& x, const WV& w, const YV& y, const RV& rstd, const char* kernel) {
  check_view<Exec, XV, 2>();
  check_view<Exec, WV, 1>();
  check_view<Exec, YV, 2>();
  check_view<Exec, RV, 1>();
  check_writable<YV>();
  check_writable<RV>();
  const std::size_t n = x.extent(0), h = x.extent(1);
  require(y.extent(0) == n && y.extent(1) == h && w.extent(0) == h && rstd.extent(0) == n, kernel,
          "shapes must be x[N,H], w[H], y[N,H], rstd[N]");
  require(h > 0, kernel, "H must be positive");
}

// One team per row: first(i, j) is the value normalised at (i, j) (x, or x + r stored into x1).
template <class Exec, class First, class SV, class WV, class YV, class RV>
void rmsnorm_rows(const Exec& exec, const char* kernel, const First& first, const SV& stored, const WV& w,
                  const YV& y, const RV& rstd, const kx::acc_t<typename YV::non_const_value_type> eps) {
  const std::int64_t n = stored.extent(0);
  const std::int64_t h = stored.extent(1);
  using T = kx::acc_t<typename YV::non_const_value_type>;
  using member = typename Teams<Exec>::member_type;
  const auto policy = teams(exec, n, kernel);
  Kokkos::parallel_for(
      std::string("tptrain::kernels::") + kernel, policy, KOKKOS_LAMBDA(const member& team) {
        const std::int64_t i = team.league_rank();
        T sq = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, h),
            [&](const std::int64_t j, T& acc) {
              const T v = first(i, j);
              acc += v * v;
            },
            sq);
        if (First::stores) team.team_barrier();  // x1 is written before any thread reads it back
        const T rs = T(1) / kx::sqrt(sq / static_cast<T>(h) + eps);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, h), [&](const std::int64_t j) {
          y(i, j) = static_cast<T>(stored(i, j)) * rs * static_cast<T>(w(j));
        });
        Kokkos::single(Kokkos::PerTeam(team), [&]() { rstd(i) = rs; });
      });
}

template <class XV>
struct RmsRowValue {
  static constexpr bool stores = false;
  XV x;
  KOKKOS_INLINE_FUNCTION typename XV::non_const_value_type operator()(const std::int64_t i, const std::int64_t j) const {
    return x(i, j);
  }
};
// x1 = x + r, stored (rounded once if 16-bit), so that the statistics are those of x1 as stored.
template <class XV, class ResV, class X1V>
struct RmsResidualRowValue {
  static constexpr bool stores = true;
  XV x;
  ResV r;
  X1V x1;
  KOKKOS_INLINE_FUNCTION typename X1V::non_const_value_type operator()(const std::int64_t i,
                                                                       const std::int64_t j) const {
    const typename X1V::non_const_value_type v = x(i, j) + r(i, j);
    x1(i, j) = v;
    return v;
  }
};

// Summand of dw at (i, j): dy · x̂.
template <class DYV, class XV, class RV, class DWV>
struct RmsNormWeightGradOp {
  using value_type = kx::acc_t<typename DWV::non_const_value_type>;
  static constexpr int terms = 1;
  DYV dy;
  XV x;
  RV rstd;
  DWV dw;
  KOKKOS_INLINE_FUNCTION void summands(const std::int64_t i, const std::int64_t j, value_type (&s)[1]) const {
    s[0] = static_cast<value_type>(dy(i, j)) * (static_cast<value_type>(x(i, j)) * rstd(i));
  }
  KOKKOS_INLINE_FUNCTION void accumulate(const std::int64_t j, const value_type (&sum)[1]) const { dw(j) += sum[0]; }
};

}  // namespace detail

template <class Exec, class XV, class WV, class YV, class RV>
void rmsnorm_forward(const Exec& exec,
                     const XV& x,     // [N, H]
                     const WV& w,     // [H]
                     const YV& y,     // [N, H] out (overwritten; must not alias x)
                     const RV& rstd,  // [N] out, saved for backward
                     const kx::acc_t<typename YV::non_const_value_type> eps) {
  detail::check_rmsnorm<Exec>(x, w, y, rstd, "rmsnorm_forward");
  detail::rmsnorm_rows(exec, "rmsnorm_forward", detail::RmsRowValue<XV>{x}, x, w, y, rstd, eps);
}

// Residual add fused with the RMSNorm after it: x1 = x + r (stored), y = RMSNorm(x1), bitwise
// rmsnorm_forward(x1). x1 may alias x or r; y aliases none of them.
template <class Exec, class XV, class ResV, class X1V, class WV, class YV, class RV>
void add_rmsnorm_forward(const Exec& exec, const XV& x, const ResV& r, const X1V& x1, const WV& w, const YV& y,
                         const RV& rstd, const kx::acc_t<typename YV::non_const_value_type> eps) {
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, ResV, 2>();
  detail::check_view<Exec, X1V, 2>();
  detail::check_writable<X1V>();
  detail::check_rmsnorm<Exec>(x1, w, y, rstd, "add_rmsnorm_forward");
  detail::require(x.extent(0) == x1.extent(0) && x.extent(1) == x1.extent(1) && r.extent(0) == x1.extent(0) &&
                      r.extent(1) == x1.extent(1),
                  "add_rmsnorm_forward", "x, r and x1 must have the same extents");
  detail::rmsnorm_rows(exec, "add_rmsnorm_forward", detail::RmsResidualRowValue<XV, ResV, X1V>{x, r, x1}, x1, w, y,
                       rstd, eps);
}

// dx overwritten (may alias dy), dw accumulated. `workspace`: rank 1, >=
// column_sums_workspace_size(N, H, 1) elements of acc_t of dw's type.
template <class Exec, class DYV, class XV, class WV, class RV, class DXV, class DWV, class SV>
void rmsnorm_backward(const Exec& exec,
                      const DYV& dy,    // [N, H]
                      const XV& x,      // [N, H] forward input
                      const WV& w,      // [H]
                      const RV& rstd,   // [N] from rmsnorm_forward
                      const DXV& dx,    // [N, H] out
                      const DWV& dw,    // [H] accumulated
                      const SV& workspace) {
  detail::check_view<Exec, DYV, 2>();
  detail::check_view<Exec, DXV, 2>();
  detail::check_view<Exec, DWV, 1>();
  detail::check_writable<DXV>();
  detail::check_writable<DWV>();
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, WV, 1>();
  detail::check_view<Exec, RV, 1>();
  const std::int64_t n = x.extent(0), h = x.extent(1);
  const auto un = static_cast<std::size_t>(n), uh = static_cast<std::size_t>(h);
  detail::require(dy.extent(0) == un && dy.extent(1) == uh && dx.extent(0) == un && dx.extent(1) == uh &&
                      w.extent(0) == uh && rstd.extent(0) == un && dw.extent(0) == uh,
                  "rmsnorm_backward", "shapes must be dy,x,dx[N,H], w,dw[H], rstd[N]");
  using T = kx::acc_t<typename DXV::non_const_value_type>;
  using member = typename detail::Teams<Exec>::member_type;
  const auto policy = detail::teams(exec, n, "rmsnorm_backward");
  // The weight gradient first, so that dx may alias dy.
  using Op = detail::RmsNormWeightGradOp<DYV, XV, RV, DWV>;
  column_sums<Exec, Op, SV>(exec, "rmsnorm_backward_weight", n, h, Op{dy, x, rstd, dw}, workspace);
  Kokkos::parallel_for(
      "tptrain::kernels::rmsnorm_backward_input", policy, KOKKOS_LAMBDA(const member& team) {
        const std::int64_t i = team.league_rank();
        const T rs = rstd(i);
        T sum_gx = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, h),
            [&](const std::int64_t j, T& acc) {
              acc += static_cast<T>(dy(i, j)) * static_cast<T>(w(j)) * (static_cast<T>(x(i, j)) * rs);
            },
            sum_gx);
        const T mean_gx = sum_gx / static_cast<T>(h);
        team.team_barrier();  // every thread has read its dy before any writes dx (dx may alias dy)
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, h), [&](const std::int64_t j) {
          const T xhat = static_cast<T>(x(i, j)) * rs;
          dx(i, j) = rs * (static_cast<T>(dy(i, j)) * static_cast<T>(w(j)) - xhat * mean_gx);
        });
      });
}

// The same with the workspace allocated here (and a fence before it is freed).
template <class Exec, class DYV, class XV, class WV, class RV, class DXV, class DWV>
void rmsnorm_backward(const Exec& exec, const DYV& dy, const XV& x, const WV& w, const RV& rstd, const DXV& dx,
                      const DWV& dw) {
  using T = kx::acc_t<typename DWV::non_const_value_type>;
  using SV = Kokkos::View<T*, typename Exec::memory_space>;
  const std::int64_t needed = column_sums_workspace_size(x.extent(0), x.extent(1), 1);
  SV workspace("tptrain::kernels::rmsnorm_backward_workspace", static_cast<std::size_t>(needed));  // zeroed counts
  rmsnorm_backward(exec, dy, x, w, rstd, dx, dw, workspace);
  if (needed > 0) kx::fence(exec, "tptrain::kernels::rmsnorm_backward: free workspace");
}

}  // namespace tptrain::kernels
