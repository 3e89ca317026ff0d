// LayerNorm over the feature dimension (PyTorch semantics: biased variance, eps inside sqrt):
//   mean = Σ_j x_j / H,  rstd = 1 / sqrt(Σ_j (x_j - mean)² / H + eps)
//   y_j = (x_j - mean) · rstd · γ_j + β_j
// Row statistics use one team per row (team reductions: deterministic for a fixed team size);
// the mean and the variance are two passes over the row (the row is in cache for the second;
// a one-pass Σx² - (Σx)²/H would cancel for rows with |mean| >> std). The passes over a row read
// it from a team-scratch copy when it fits (H·sizeof ≲ 40 KiB on CUDA: H = 8192 in float), so
// that global memory sees each input once (detail::ScratchRow).
// dγ/dβ are two-stage column sums (kokkos_kernels/column_sums.hpp): no atomics, bitwise
// reproducible for any thread count, team size and column block.
// Precision: x, γ, β, y, dy, dx may hold kx::bf16 / kx::fp16; every sum, the statistics and
// each output value are computed in acc_t of the output (float for 16-bit), and each output is
// rounded once when stored. mean/rstd and dγ/dβ are meant to be float (acc_t) views.
// Views: any layout, managed or unmanaged, subviews.
#pragma once

#include "kokkos_kernels/column_sums.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

namespace detail {

// Shapes of layernorm_forward given its input x [N, H] (x checked by the caller).
template <class Exec, class XV, class GV, class BV, class YV, class MV, class RV>
void check_layernorm_forward(const XV& x, const GV& gamma, const BV& beta, const YV& y,
                             const MV& mean, const RV& rstd, const char* kernel) {
  check_view<Exec, GV, 1>();
  check_view<Exec, BV, 1>();
  check_view<Exec, YV, 2>();
  check_view<Exec, MV, 1>();
  check_view<Exec, RV, 1>();
  check_writable<YV>();
  check_writable<MV>();
  check_writable<RV>();
  const std::size_t n = x.extent(0), h = x.extent(1);
  require(y.extent(0) == n && y.extent(1) == h && gamma.extent(0) == h && beta.extent(0) == h &&
              mean.extent(0) == n && rstd.extent(0) == n,
          kernel, "shapes must be x[N,H], gamma[H], beta[H], y[N,H], mean[N], rstd[N]");
  require(h > 0, kernel, "H must be positive");
}

// The rest of one row's LayerNorm once the team has Σ_j x(i, j): mean, the variance as a second
// pass over the centred row, y, and the saved statistics. xv(j) is x(i, j) (from global memory or
// the team's scratch copy).
template <class Member, class T, class XA, class GV, class BV, class YV, class MV, class RV>
KOKKOS_INLINE_FUNCTION void layernorm_row(const Member& team, const std::int64_t i,
                                          const std::int64_t h, const T sum, const XA& xv,
                                          const GV& gamma, const BV& beta, const YV& y,
                                          const MV& mean, const RV& rstd, const T eps) {
  const T mu = sum / static_cast<T>(h);
  T sq = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, h),
      [&](const std::int64_t j, T& acc) {
        const T d = xv(j) - mu;
        acc += d * d;
      },
      sq);
  const T rs = T(1) / kx::sqrt(sq / static_cast<T>(h) + eps);
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, h), [&](const std::int64_t j) {
    y(i, j) = (xv(j) - mu) * rs * gamma(j) + beta(j);
  });
  Kokkos::single(Kokkos::PerTeam(team), [&]() {
    mean(i) = mu;
    rstd(i) = rs;
  });
}

// The first pass over a row: the value LayerNorm normalises at (i, j). RowValue reads x;
// ResidualRowValue forms x + r and stores it in x1 (the residual stream), rounded once if 16-bit,
// so that the statistics are those of x1 as stored.
template <class XV>
struct RowValue {
  using value_type = typename XV::non_const_value_type;
  static constexpr bool stores = false;
  XV x;
  KOKKOS_INLINE_FUNCTION value_type operator()(const std::int64_t i, const std::int64_t j) const { return x(i, j); }
};
template <class XV, class ResV, class X1V>
struct ResidualRowValue {
  using value_type = typename X1V::non_const_value_type;
  static constexpr bool stores = true;
  XV x;
  ResV r;
  X1V x1;
  KOKKOS_INLINE_FUNCTION value_type operator()(const std::int64_t i, const std::int64_t j) const {
    const value_type v = x(i, j) + r(i, j);
    x1(i, j) = v;
    return v;
  }
};

// x1 = x + (r + bias): a row-parallel layer's output r whose bias the layer left to this pass
// (Megatron's skip_bias_add); r + bias is rounded to the storage type first, as a separate bias
// add would store it.
template <class XV, class ResV, class BiasV, class X1V>
struct BiasedResidualRowValue {
  using value_type = typename X1V::non_const_value_type;
  static constexpr bool stores = true;
  XV x;
  ResV r;
  BiasV bias;
  X1V x1;
  KOKKOS_INLINE_FUNCTION value_type operator()(const std::int64_t i, const std::int64_t j) const {
    const value_type rb = r(i, j) + bias(j);
    const value_type v = x(i, j) + rb;
    x1(i, j) = v;
    return v;
  }
};

// One team per row: the first pass takes first(i, j) and sums it, keeping the row in team
// scratch when it fits; the later passes (layernorm_row) read the scratch copy or `stored`, the
// view that holds the row in global memory.
template <class Exec, class First, class SV, class GV, class BV, class YV, class MV, class RV>
void layernorm_forward_rows(const Exec& exec, const char* kernel, const First& first,
                            const SV& stored, const GV& gamma, const BV& beta, const YV& y, const MV& mean, const RV& rstd,
                            const kx::acc_t<typename YV::non_const_value_type> eps) {
  const std::int64_t n = stored.extent(0);
  const std::int64_t h = stored.extent(1);
  using T = kx::acc_t<typename YV::non_const_value_type>;
  using V = typename First::value_type;
  using Row = ScratchRow<Exec, V>;
  using member = typename Teams<Exec>::member_type;
  const std::size_t row_bytes = scratch_row_bytes<Exec, V>(h);
  // Compile-time false on host backends: their loops carry no scratch branch at all.
  constexpr bool can_cache = scratch_rows<Exec>();
  const auto teams = row_teams(exec, n, row_bytes, kernel);
  const bool fits = teams.cached;
  Kokkos::parallel_for(
      std::string("tptrain::kernels::") + kernel, teams.policy, KOKKOS_LAMBDA(const member& team) {
        const bool cached = can_cache && fits;
        const std::int64_t i = team.league_rank();
        const Row buf = cached ? Row(team.team_scratch(0), h) : Row();
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, h),
            [&](const std::int64_t j, T& acc) {
              const V v = first(i, j);
              if (cached) buf(j) = v;
              acc += v;
            },
            sum);
        // The row is in scratch (or, when first() stores it, in `stored`) before any thread
        // reads entries another thread wrote.
        if (cached || First::stores) team.team_barrier();
        const auto xv = [&](const std::int64_t j) -> V { return cached ? buf(j) : stored(i, j); };
        layernorm_row(team, i, h, sum, xv, gamma, beta, y, mean, rstd, eps);
      });
}

}  // namespace detail

template <class Exec, class XV, class GV, class BV, class YV, class MV, class RV>
void layernorm_forward(const Exec& exec,
                       const XV& x,      // [N, H]
                       const GV& gamma,  // [H]
                       const BV& beta,   // [H]
                       const YV& y,      // [N, H] out (overwritten)
                       const MV& mean,   // [N] out, saved for backward
                       const RV& rstd,   // [N] out, saved for backward
                       const kx::acc_t<typename YV::non_const_value_type> eps) {
  detail::check_view<Exec, XV, 2>();
  detail::check_layernorm_forward<Exec, XV, GV, BV, YV, MV, RV>(x, gamma, beta, y, mean, rstd,
                                                                "layernorm_forward");
  detail::layernorm_forward_rows(exec, "layernorm_forward", detail::RowValue<XV>{x}, x, gamma, beta,
                                 y, mean, rstd, eps);
}

// Residual add fused with the LayerNorm that follows it (pre-LN blocks: x₁ = x + r is the
// residual stream, LN₂ normalises it), one pass over x and r instead of two:
//   x1 = x + r   (stored),   y = LayerNorm(x1)   (as layernorm_forward(x1), bitwise)
// x1 may alias x or r (an in-place residual add); y aliases none of them.
template <class Exec, class XV, class ResV, class X1V, class GV, class BV, class YV, class MV,
          class RV>
void add_layernorm_forward(const Exec& exec,
                           const XV& x,      // [N, H]
                           const ResV& r,     // [N, H] residual branch
                           const X1V& x1,    // [N, H] out: x + r
                           const GV& gamma,  // [H]
                           const BV& beta,   // [H]
                           const YV& y,      // [N, H] out (overwritten)
                           const MV& mean,   // [N] out, saved for backward
                           const RV& rstd,   // [N] out, saved for backward
                           const kx::acc_t<typename YV::non_const_value_type> eps) {
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, ResV, 2>();
  detail::check_view<Exec, X1V, 2>();
  detail::check_writable<X1V>();
  detail::check_layernorm_forward<Exec, X1V, GV, BV, YV, MV, RV>(x1, gamma, beta, y, mean, rstd,
                                                                 "add_layernorm_forward");
  detail::require(x.extent(0) == x1.extent(0) && x.extent(1) == x1.extent(1) &&
                      r.extent(0) == x1.extent(0) && r.extent(1) == x1.extent(1),
                  "add_layernorm_forward", "x, r and x1 must have the same extents");
  detail::layernorm_forward_rows(exec, "add_layernorm_forward",
                                 detail::ResidualRowValue<XV, ResV, X1V>{x, r, x1}, x1, gamma, beta, y,
                                 mean, rstd, eps);
}

// The same with r's bias added on the way (a row-parallel layer with skip_bias_add):
//   x1 = x + (r + bias)   (stored),   y = LayerNorm(x1)
// One pass instead of a bias add and then add_layernorm_forward, with the same roundings.
template <class Exec, class XV, class ResV, class RBV, class X1V, class GV, class BV, class YV, class MV,
          class RV>
void add_bias_layernorm_forward(const Exec& exec,
                                const XV& x,         // [N, H]
                                const ResV& r,       // [N, H] residual branch, without its bias
                                const RBV& r_bias,   // [H] the residual branch's bias
                                const X1V& x1,       // [N, H] out: x + (r + r_bias)
                                const GV& gamma,     // [H]
                                const BV& beta,      // [H]
                                const YV& y,         // [N, H] out (overwritten)
                                const MV& mean,      // [N] out, saved for backward
                                const RV& rstd,      // [N] out, saved for backward
                                const kx::acc_t<typename YV::non_const_value_type> eps) {
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, ResV, 2>();
  detail::check_view<Exec, RBV, 1>();
  detail::check_view<Exec, X1V, 2>();
  detail::check_writable<X1V>();
  detail::check_layernorm_forward<Exec, X1V, GV, BV, YV, MV, RV>(x1, gamma, beta, y, mean, rstd,
                                                                 "add_bias_layernorm_forward");
  detail::require(x.extent(0) == x1.extent(0) && x.extent(1) == x1.extent(1) &&
                      r.extent(0) == x1.extent(0) && r.extent(1) == x1.extent(1) &&
                      r_bias.extent(0) == x1.extent(1),
                  "add_bias_layernorm_forward", "x, r and x1 must have the same extents, r_bias [H]");
  detail::layernorm_forward_rows(exec, "add_bias_layernorm_forward",
                                 detail::BiasedResidualRowValue<XV, ResV, RBV, X1V>{x, r, r_bias, x1}, x1, gamma,
                                 beta, y, mean, rstd, eps);
}

namespace detail {

// Summands of the LayerNorm parameter gradients at (i, j): (dy·x̂, dy) -> (dγ, dβ).
template <class DYV, class XV, class MV, class RV, class DGV, class DBV>
struct LayerNormParamGradOp {
  using value_type = kx::acc_t<typename DGV::non_const_value_type>;
  static constexpr int terms = 2;
  DYV dy;
  XV x;
  MV mean;
  RV rstd;
  DGV dgamma;
  DBV dbeta;
  KOKKOS_INLINE_FUNCTION void summands(const std::int64_t i, const std::int64_t j,
                                       value_type (&s)[2]) const {
    const value_type g = dy(i, j);
    s[0] = g * ((x(i, j) - mean(i)) * rstd(i));
    s[1] = g;
  }
  KOKKOS_INLINE_FUNCTION void accumulate(const std::int64_t j, const value_type (&sum)[2]) const {
    dgamma(j) += sum[0];
    dbeta(j) += sum[1];
  }
};

}  // namespace detail

// x̂ = (x - mean) · rstd,  g = dy · γ
// dx = rstd · (g - mean_j(g) - x̂ · mean_j(g · x̂))   (overwritten)
// dγ += Σ_rows dy · x̂,  dβ += Σ_rows dy             (accumulated)
// dx may alias dy (an in-place backward); no other aliasing. CB: see detail::ColumnBlock.
// `workspace`: rank 1, >= column_sums_workspace_size(N, H, 2) elements of acc_t of dγ's type.
//
// layernorm_backward_add: dx = that + residual, the gradient of a pre-LN block's input, which
// reaches it through the LayerNorm and through the residual path (one pass instead of a
// separate add; dx rounded once). residual may alias neither dx nor dy.
template <class Exec, class DYV, class XV, class GV, class MV, class RV, class ResV, class DXV, class DGV,
          class DBV, class WV, int CB = detail::ColumnBlock<Exec>::value>
void layernorm_backward_add(const Exec& exec,
                            const DYV& dy,           // [N, H]
                            const XV& x,             // [N, H] forward input
                            const GV& gamma,         // [H]
                            const MV& mean,          // [N] from layernorm_forward
                            const RV& rstd,          // [N] from layernorm_forward
                            const ResV& residual,    // [N, H], or an empty view: nothing added
                            const DXV& dx,           // [N, H] out (overwritten)
                            const DGV& dgamma,       // [H] accumulated
                            const DBV& dbeta,        // [H] accumulated
                            const WV& workspace) {  // scratch, see above
  const bool add = residual.size() > 0;
  if (add) {
    detail::check_view<Exec, ResV, 2>();
    detail::require(residual.extent(0) == dx.extent(0) && residual.extent(1) == dx.extent(1),
                    "layernorm_backward_add", "residual must have the extents of dx");
  }
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
  using T = kx::acc_t<typename DXV::non_const_value_type>;
  using DYT = typename DYV::non_const_value_type;
  using XT = typename XV::non_const_value_type;
  using member = typename detail::Teams<Exec>::member_type;
  // dy and x rows in team scratch when both fit (H <= 4096 in float on CUDA): the three passes
  // then read them from global memory once.
  const std::size_t row_bytes =
      detail::scratch_row_bytes<Exec, DYT>(h) + detail::scratch_row_bytes<Exec, XT>(h);
  // Compile-time false on host backends: their loops carry no scratch branch at all.
  constexpr bool can_cache = detail::scratch_rows<Exec>();
  // Made before the first kernel: a refused row count must leave dgamma/dbeta untouched.
  const auto row_teams = detail::row_teams(exec, n, row_bytes, "layernorm_backward");
  const bool fits = row_teams.cached;
  // Parameter gradients first, so that dx may alias dy. (column_sums checks the workspace
  // before it launches anything.)
  using Op = detail::LayerNormParamGradOp<DYV, XV, MV, RV, DGV, DBV>;
  column_sums<Exec, Op, WV, CB>(exec, "layernorm_backward_params", n, h,
                                Op{dy, x, mean, rstd, dgamma, dbeta}, workspace);
  Kokkos::parallel_for(
      "tptrain::kernels::layernorm_backward_input", row_teams.policy,
      KOKKOS_LAMBDA(const member& team) {
        const bool cached = can_cache && fits;
        const std::int64_t i = team.league_rank();
        const T mu = mean(i);
        const T rs = rstd(i);
        const detail::ScratchRow<Exec, DYT> dyb =
            cached ? detail::ScratchRow<Exec, DYT>(team.team_scratch(0), h)
                   : detail::ScratchRow<Exec, DYT>();
        const detail::ScratchRow<Exec, XT> xb =
            cached ? detail::ScratchRow<Exec, XT>(team.team_scratch(0), h)
                   : detail::ScratchRow<Exec, XT>();
        const auto dyv = [&](const std::int64_t j) -> DYT { return cached ? dyb(j) : dy(i, j); };
        const auto xv = [&](const std::int64_t j) -> XT { return cached ? xb(j) : x(i, j); };
        T sum_g = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, h),
            [&](const std::int64_t j, T& acc) {
              const DYT g = dy(i, j);
              if (cached) dyb(j) = g;
              acc += g * gamma(j);
            },
            sum_g);
        if (cached) team.team_barrier();  // dy is in scratch before any thread reads it
        T sum_gx = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, h),
            [&](const std::int64_t j, T& acc) {
              const XT v = x(i, j);
              if (cached) xb(j) = v;
              acc += dyv(j) * gamma(j) * ((v - mu) * rs);
            },
            sum_gx);
        const T mean_g = sum_g / static_cast<T>(h);
        const T mean_gx = sum_gx / static_cast<T>(h);
        if (cached) team.team_barrier();  // likewise x
        // (dx may alias dy: each entry is read before this thread writes it)
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, h), [&](const std::int64_t j) {
          const T xhat = (xv(j) - mu) * rs;
          const T g = rs * (dyv(j) * gamma(j) - mean_g - xhat * mean_gx);
          dx(i, j) = add ? g + T(residual(i, j)) : g;
        });
      });
}

template <class Exec, class DYV, class XV, class GV, class MV, class RV, class DXV, class DGV,
          class DBV, class WV, int CB = detail::ColumnBlock<Exec>::value>
void layernorm_backward(const Exec& exec,
                        const DYV& dy,           // [N, H]
                        const XV& x,             // [N, H] forward input
                        const GV& gamma,         // [H]
                        const MV& mean,          // [N] from layernorm_forward
                        const RV& rstd,          // [N] from layernorm_forward
                        const DXV& dx,           // [N, H] out (overwritten)
                        const DGV& dgamma,       // [H] accumulated
                        const DBV& dbeta,        // [H] accumulated
                        const WV& workspace) {  // scratch, see above
  layernorm_backward_add<Exec, DYV, XV, GV, MV, RV, DYV, DXV, DGV, DBV, WV, CB>(
      exec, dy, x, gamma, mean, rstd, DYV(), dx, dgamma, dbeta, workspace);
}

// The same with the workspace allocated here (and a fence before it is freed).
template <class Exec, class DYV, class XV, class GV, class MV, class RV, class DXV, class DGV,
          class DBV, int CB = detail::ColumnBlock<Exec>::value>
void layernorm_backward(const Exec& exec, const DYV& dy, const XV& x, const GV& gamma,
                        const MV& mean, const RV& rstd, const DXV& dx, const DGV& dgamma,
                        const DBV& dbeta) {
  using T = kx::acc_t<typename DGV::non_const_value_type>;
  using WV = Kokkos::View<T*, typename Exec::memory_space>;
  const std::int64_t needed = column_sums_workspace_size(x.extent(0), x.extent(1), 2);
  WV workspace("tptrain::kernels::layernorm_backward_workspace", static_cast<std::size_t>(needed));  // zeroed counts
  layernorm_backward<Exec, DYV, XV, GV, MV, RV, DXV, DGV, DBV, WV, CB>(
      exec, dy, x, gamma, mean, rstd, dx, dgamma, dbeta, workspace);
  if (needed > 0) kx::fence(exec, "tptrain::kernels::layernorm_backward: free workspace");
}

}  // namespace tptrain::kernels
