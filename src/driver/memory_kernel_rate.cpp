#include "src/driver/memory_kernel_rate.hpp"

#include "kokkos_kernels/gelu.hpp"
#include "kokkos_kernels/layernorm.hpp"
#include "kokkos_kernels/precision.hpp"
#include "kokkos_kernels/views.hpp"
#include "src/driver/run_rate.hpp"

namespace tptrain::driver {

template double measure_memory_kernel_bytes_per_s<float>(std::int64_t, std::int64_t, std::int64_t, double, int);
template double measure_memory_kernel_bytes_per_s<kx::bf16>(std::int64_t, std::int64_t, std::int64_t, double, int);
template double measure_memory_kernel_bytes_per_s<kx::fp16>(std::int64_t, std::int64_t, std::int64_t, double, int);

template <class T>
double measure_memory_kernel_bytes_per_s(std::int64_t rows, std::int64_t hidden, std::int64_t ffn, double min_seconds,
                                         int min_runs) {
  using F = kx::acc_t<T>;
  const kx::ExecSpace exec;
  using Policy = Kokkos::RangePolicy<kx::ExecSpace, Kokkos::IndexType<std::int64_t>>;
  kernels::Matrix<T> x("memory_kernel_rate.x", rows, hidden), y("memory_kernel_rate.y", rows, hidden),
      dy("memory_kernel_rate.dy", rows, hidden), dx("memory_kernel_rate.dx", rows, hidden);
  kernels::Vector<T> gamma("memory_kernel_rate.gamma", hidden), beta("memory_kernel_rate.beta", hidden);
  kernels::Vector<F> mean("memory_kernel_rate.mean", rows), rstd("memory_kernel_rate.rstd", rows),
      dgamma("memory_kernel_rate.dgamma", hidden), dbeta("memory_kernel_rate.dbeta", hidden);
  kernels::Matrix<T> h("memory_kernel_rate.h", rows, ffn), a("memory_kernel_rate.a", rows, ffn),
      sig("memory_kernel_rate.sig", rows, ffn), da("memory_kernel_rate.da", rows, ffn),
      dh("memory_kernel_rate.dh", rows, ffn);
  kernels::Vector<T> bias("memory_kernel_rate.bias", ffn);
  // Values of order 1 (no overflow in any precision); the bias stays 0 so that h does not grow
  // from pass to pass (bias_gelu_forward adds it in place).
  Kokkos::parallel_for(
      "tptrain::memory_kernel_rate::fill", Policy(exec, 0, rows), KOKKOS_LAMBDA(const std::int64_t i) {
        for (std::int64_t j = 0; j < hidden; ++j) {
          x(i, j) = T(0.1f * float((i * 7 + j * 13) % 17 - 8));
          dy(i, j) = T(0.01f * float((i * 5 + j * 3) % 11 - 5));
        }
        for (std::int64_t j = 0; j < ffn; ++j) {
          h(i, j) = T(0.1f * float((i * 3 + j * 11) % 13 - 6));
          da(i, j) = T(0.01f * float((i * 5 + j * 7) % 11 - 5));
        }
      });
  Kokkos::deep_copy(exec, gamma, T(1.0f));
  const auto pass = [&] {
    kernels::layernorm_forward(exec, x, gamma, beta, y, mean, rstd, F(1e-5f));
    kernels::layernorm_backward(exec, dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
    kernels::bias_gelu_forward(exec, h, bias, a, sig);
    kernels::gelu_backward_from_sigmoid(exec, da, h, sig, dh);
    kx::fence(exec, "tptrain::memory_kernel_rate");
  };
  pass();  // untimed: first touch
  const double e = sizeof(T);
  const double bytes = 3.0 * 2.0 * double(rows) * double(hidden) * e + 3.0 * 2.0 * double(rows) * double(ffn) * e;
  return rate_of_runs(bytes, min_runs, min_seconds, RunStatistic::median, pass);
}

}  // namespace tptrain::driver
