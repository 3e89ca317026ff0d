// Bias of a Linear layer: y += b per row; db += column sums of dy.
// Precision: y, b, dy may hold kx::bf16 / kx::fp16 (y + b is summed in float and rounded once);
// db is meant to be float, and the column sums run in acc_t of db (float for a 16-bit db), with
// a workspace of that type.
// Views: any layout, managed or unmanaged, subviews.
#pragma once

#include "kokkos_kernels/column_sums.hpp"
#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

// y(t, j) += b(j)
template <class Exec, class YV, class BV>
void bias_add(const Exec& exec,
              const YV& y,    // [N, out]
              const BV& b) {  // [out]
  detail::check_view<Exec, YV, 2>();
  detail::check_view<Exec, BV, 1>();
  detail::check_writable<YV>();
  detail::require(b.extent(0) == y.extent(1), "bias_add", "b must have y.extent(1) entries");
  Kokkos::parallel_for(
      "tptrain::kernels::bias_add", detail::range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t t, const std::int64_t j) { y(t, j) += b(j); });
}

// y = x + (r + b): a row-parallel layer's output r, whose bias it left to this pass
// (skip_bias_add), added to the residual stream x. r + b is rounded to the storage type first,
// as bias_add would store it, then added: bitwise bias_add followed by add, in one launch.
// y may alias x or r.
template <class Exec, class XV, class RV, class BV, class YV>
void bias_residual_add(const Exec& exec,
                       const XV& x,    // [N, out]
                       const RV& r,    // [N, out]
                       const BV& b,    // [out]
                       const YV& y) {  // [N, out]
  detail::check_view<Exec, XV, 2>();
  detail::check_view<Exec, RV, 2>();
  detail::check_view<Exec, BV, 1>();
  detail::check_view<Exec, YV, 2>();
  detail::check_writable<YV>();
  detail::require(x.extent(0) == y.extent(0) && x.extent(1) == y.extent(1) && r.extent(0) == y.extent(0) &&
                      r.extent(1) == y.extent(1) && b.extent(0) == y.extent(1),
                  "bias_residual_add", "shapes must be x, r, y [N, out], b [out]");
  using T = typename YV::non_const_value_type;
  Kokkos::parallel_for(
      "tptrain::kernels::bias_residual_add", detail::range2d(exec, y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(const std::int64_t t, const std::int64_t j) {
        const T rb = r(t, j) + b(j);
        y(t, j) = x(t, j) + rb;
      });
}

namespace detail {
template <class Exec, class DYV, class DBV>
void check_bias_backward(const DYV& dy, const DBV& db) {
  check_view<Exec, DYV, 2>();
  check_view<Exec, DBV, 1>();
  check_writable<DBV>();
  require(db.extent(0) == dy.extent(1), "bias_backward", "db must have dy.extent(1) entries");
}
}  // namespace detail

// db(j) += Σ_t dy(t, j): a two-stage column sum (kokkos_kernels/column_sums.hpp), no atomics,
// bitwise reproducible for any thread count and column block CB (detail::ColumnBlock).
// `workspace`: rank 1, >= column_sums_workspace_size(N, out) elements; without it the
// workspace is allocated per call.
template <class Exec, class DYV, class DBV, class WV, int CB = detail::ColumnBlock<Exec>::value>
void bias_backward(const Exec& exec,
                   const DYV& dy,           // [N, out]
                   const DBV& db,           // [out] accumulated
                   const WV& workspace) {  // [>= column_sums_workspace_size(N, out)] scratch
  detail::check_bias_backward<Exec>(dy, db);
  using Op = detail::ColumnSumOp<DYV, DBV>;
  column_sums<Exec, Op, WV, CB>(exec, "bias_backward", dy.extent(0), dy.extent(1), Op{dy, db},
                                workspace);
}

template <class Exec, class DYV, class DBV, int CB = detail::ColumnBlock<Exec>::value>
void bias_backward(const Exec& exec,
                   const DYV& dy,    // [N, out]
                   const DBV& db) {  // [out] accumulated
  detail::check_bias_backward<Exec>(dy, db);
  using Op = detail::ColumnSumOp<DYV, DBV>;
  column_sums<Exec, Op, CB>(exec, "bias_backward", dy.extent(0), dy.extent(1), Op{dy, db});
}

}  // namespace tptrain::kernels
