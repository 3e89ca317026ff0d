// A batch of token ids on the host and its device copy, for the forward-only passes (evaluation,
// generation). Training uploads its micro-batches through train::MicroBatchQueue (pinned,
// asynchronous, each kept until its backward).
#pragma once

#include <cstdint>
#include <vector>

#include "kokkos_kernels/views.hpp"

namespace tptrain::train {

struct DeviceBatch {
  kernels::Tokens inputs, targets;                 // [B*S] on the device
  std::vector<std::int32_t> h_inputs, h_targets;   // [B*S] on the host

  explicit DeviceBatch(std::int64_t n)
      : inputs("batch.inputs", n), targets("batch.targets", n),
        h_inputs(static_cast<std::size_t>(n)), h_targets(static_cast<std::size_t>(n)) {}

  // Stream-ordered on exec: the kernels of the previous batch that still read the device ids run
  // first; no fence. The host vectors are pageable memory, which the copy has consumed when it
  // returns (CUDA may synchronise with the stream to stage it).
  void upload(const kx::ExecSpace& exec) {
    using Host = Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(exec, inputs, Host(h_inputs.data(), h_inputs.size()));
    Kokkos::deep_copy(exec, targets, Host(h_targets.data(), h_targets.size()));
  }
};

}  // namespace tptrain::train
