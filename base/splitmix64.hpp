// splitmix64 (Steele, Lea, Flood 2014; the generator behind java.util.SplittableRandom): a
// bijection on 64-bit integers with good avalanche. The one copy used by the checkpoint
// checksums (docs/checkpoints.md), the batch sampler and the parameter initialisation, whose
// kernels call it on CUDA/HIP devices. This header must not include Kokkos: io/ is built
// without it, hence the small host/device macro instead of KOKKOS_INLINE_FUNCTION.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TPTRAIN_HOST_DEVICE __host__ __device__
#else
#define TPTRAIN_HOST_DEVICE
#endif

namespace tptrain::util {

// x += 0x9E3779B97F4A7C15, then the splitmix64 finaliser; all arithmetic mod 2^64.
TPTRAIN_HOST_DEVICE constexpr inline std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static_assert(splitmix64(0) == 0xE220A8397B1DCDAFull, "splitmix64 known answer");

}  // namespace tptrain::util
