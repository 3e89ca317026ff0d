// Deterministic, layout-independent initialisation: element value = f(seed, parameter name,
// logical flat index), computed on the device with a counter-based generator (splitmix64 and
// Box-Muller), so no rank ever materialises the full tensor.
#pragma once

#include <cmath>

#include "base/splitmix64.hpp"
#include "kokkos_kernels/detail.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "src/model/parameter.hpp"

namespace tptrain::model {

using util::splitmix64;  // host and device (base/splitmix64.hpp)

// Standard normal sample number `index` of stream `stream` (Box-Muller on two 53-bit uniforms).
KOKKOS_INLINE_FUNCTION double normal_sample(std::uint64_t stream, std::uint64_t index) {
  const std::uint64_t a = splitmix64(stream ^ splitmix64(2 * index));
  const std::uint64_t b = splitmix64(stream ^ splitmix64(2 * index + 1));
  const double u1 = (static_cast<double>(a >> 11) + 1.0) * (1.0 / 9007199254740992.0);  // (0,1]
  const double u2 = static_cast<double>(b >> 11) * (1.0 / 9007199254740992.0);          // [0,1)
  return kx::sqrt(-2.0 * kx::log(u1)) * kx::cos(6.283185307179586 * u2);
}

inline std::uint64_t name_hash(const std::string& name) {  // FNV-1a
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Draws p.master (allocated already, e.g. a slice of its bucket's flat buffer) and rounds it into
// p.value when that is a separate compute copy: a bf16 run starts from the fp32 run's weights.
template <class T>
void initialise(Parameter<T>& p, std::uint64_t seed) {
  using Acc = typename Parameter<T>::Acc;
  const std::int64_t n = p.local_size();

  // Everything the kernel needs, by value (no host containers on the device).
  const std::uint64_t stream = splitmix64(seed) ^ name_hash(p.name);
  const int dim = p.sharding.dim;
  const std::int64_t cols_local = p.cols();
  const std::int64_t cols_global = p.shape.size() > 1 ? p.shape[1] : 1;
  const Sharding sharding = p.sharding;
  const std::int64_t tp_rank = p.tp_rank, tp_size = p.tp_size;
  const std::int64_t saved_rows = p.saved_rows;
  const double stddev = p.init_std;
  const Acc constant = static_cast<Acc>(p.init_const);
  auto value = p.master;
  Kokkos::parallel_for(
      "tptrain::model::initialise", kernels::detail::range(kx::ExecSpace(), n),
      KOKKOS_LAMBDA(const std::int64_t i) {
        std::int64_t row = i / cols_local, col = i % cols_local;
        if (dim == 0) row = sharding.logical_index(row, tp_rank, tp_size);
        if (dim == 1) col = sharding.logical_index(col, tp_rank, tp_size);
        if (row >= saved_rows) {  // vocabulary padding: stays zero forever
          value(i) = Acc(0);
          return;
        }
        value(i) = stddev > 0 ? static_cast<Acc>(stddev * normal_sample(stream, static_cast<std::uint64_t>(
                                                                      row * cols_global + col)))
                              : constant;
      });
  if constexpr (Parameter<T>::has_master_copy) kernels::convert(kx::ExecSpace(), p.master, p.value);
}

// A parameter on its own (layer tests): its buffers, zeroed, then the initial value.
template <class T>
void allocate_and_initialise(Parameter<T>& p, std::uint64_t seed) {
  using Acc = typename Parameter<T>::Acc;
  const std::int64_t n = p.local_size();
  p.value = kernels::Vector<T>(p.name + ".value", n);
  if constexpr (Parameter<T>::has_master_copy) p.master = kernels::Vector<Acc>(p.name + ".master", n);
  else p.master = p.value;
  p.grad = kernels::Vector<Acc>(p.name + ".grad", n);
  p.exp_avg = kernels::Vector<Acc>(p.name + ".exp_avg", n);
  p.exp_avg_sq = kernels::Vector<Acc>(p.name + ".exp_avg_sq", n);
  initialise(p, seed);
}

}  // namespace tptrain::model
