// accumulate_loss_sum(exec, loss, count, total):  total() += Σ_{i < count} loss(i), in double.
// The sum stays on the device, so a training step can add up the losses of all its
// micro-batches and copy one number to the host at the end of the step, instead of waiting for
// every micro-batch's loss vector. Zero `total` at the start of a step
// (Kokkos::deep_copy(exec, total, 0.0)).
//
// One team does the whole sum: a per-token loss vector has micro_batch · S entries (thousands),
// and a single team needs no second pass and no atomics to add its sum into `total`, so the
// result is deterministic for a fixed team size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kokkos_kernels/compat.hpp"
#include "kokkos_kernels/detail.hpp"

namespace tptrain::kernels {

template <class Exec, class LV, class SV>
void accumulate_loss_sum(const Exec& exec,
                         const LV& loss,            // [N] per-token loss
                         const std::int64_t count,  // tokens to add: the first count, 0..N
                         const SV& total) {         // rank 0, double, in/out
  detail::check_view<Exec, LV, 1>();
  detail::check_view<Exec, SV, 0>();
  detail::check_writable<SV>();
  static_assert(std::is_same<typename SV::value_type, double>::value,
                "tptrain::kernels::accumulate_loss_sum: total must be a double");
  detail::require(count >= 0 && static_cast<std::size_t>(count) <= loss.extent(0),
                  "accumulate_loss_sum", "count must be in [0, loss.extent(0)]");
  using member_type = typename detail::Teams<Exec>::member_type;
  Kokkos::parallel_for(
      "tptrain::kernels::accumulate_loss_sum", detail::teams(exec, 1, "accumulate_loss_sum"),
      KOKKOS_LAMBDA(const member_type& team) {
        double s = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, std::int64_t(0), count),
            [&](const std::int64_t i, double& acc) { acc += static_cast<double>(loss(i)); }, s);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { total() += s; });
      });
}

}  // namespace tptrain::kernels
