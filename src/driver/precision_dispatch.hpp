// training.precision ("fp32" | "bf16" | "fp16", validated by the deck) to the storage type the
// model is instantiated with: the one place a run-time choice becomes a template argument.
#pragma once

#include <string>

#include "kokkos_kernels/precision.hpp"

namespace tptrain::driver {

// Calls f(T{}) with T = float, kx::bf16 or kx::fp16 and returns what it returns.
template <class F>
decltype(auto) with_precision(const std::string& precision, F&& f) {
  if (precision == "bf16") return f(kx::bf16{});
  if (precision == "fp16") return f(kx::fp16{});
  return f(float{});
}

}  // namespace tptrain::driver
