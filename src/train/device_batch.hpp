// A micro-batch of token ids on the host (filled by the data layer) and its device copy; for
// training also the input positions grouped by token id (kernels::TokenSegments) for the
// word-embedding gradient, built on the host while the ids are there anyway.
#pragma once

#include <cstdint>
#include <vector>

#include "kokkos_kernels/embedding.hpp"
#include "kokkos_kernels/views.hpp"

namespace tptrain::train {

struct DeviceBatch {
  kernels::Tokens inputs, targets;                 // [B*S] on the device
  std::vector<std::int32_t> h_inputs, h_targets;   // [B*S] on the host
  kernels::TokenSegments segments;                 // of the inputs, after upload_for_backward()

  explicit DeviceBatch(std::int64_t n)
      : inputs("batch.inputs", n), targets("batch.targets", n),
        h_inputs(static_cast<std::size_t>(n)), h_targets(static_cast<std::size_t>(n)) {}

  // Forward only (evaluation, generation). Stream-ordered on exec: the kernels of the previous
  // micro-batch that still read the device ids run first; no fence. The host vectors are
  // pageable memory, which the copy has consumed when it returns (CUDA may synchronise with the
  // stream to stage it: docs/design.md, "Stream-ordered communication").
  void upload(const kx::ExecSpace& exec) {
    using Host = Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    Kokkos::deep_copy(exec, inputs, Host(h_inputs.data(), h_inputs.size()));
    Kokkos::deep_copy(exec, targets, Host(h_targets.data(), h_targets.size()));
  }
  // Training: the tokens and their segments (allocated on the first call, then reused).
  void upload_for_backward(const kx::ExecSpace& exec) {
    upload(exec);
    segments.build(exec, h_inputs.data(), static_cast<std::int64_t>(h_inputs.size()));
  }
};

}  // namespace tptrain::train
