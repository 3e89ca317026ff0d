#include "src/driver/gemm_peak.hpp"

#include <chrono>

#include "kokkos_kernels/gemm.hpp"
#include "kokkos_kernels/precision.hpp"
#include "kokkos_kernels/views.hpp"

namespace tptrain::driver {

std::vector<GemmShape> model_gemms(const model::GptShape& s, int micro_batch) {
  const std::int64_t N = std::int64_t(micro_batch) * s.seq_length, H = s.hidden;
  return {
      {N, s.local_qkv_width(), H, "attention QKV"},
      {N, H, s.local_hidden(), "attention projection"},
      {N, s.fc_width() / s.tensor, H, s.swiglu() ? "MLP gate|up" : "MLP fc"},
      {N, H, s.local_ffn(), "MLP projection"},
      {N, s.local_vocab(), H, "logits"},
  };
}

GemmShape largest_model_gemm(const model::GptShape& s, int micro_batch) {
  const std::vector<GemmShape> candidates = model_gemms(s, micro_batch);
  GemmShape best = candidates[0];
  for (const GemmShape& g : candidates)
    if (g.flops() > best.flops()) best = g;
  return best;
}

template double measure_gemm_flops<float>(const GemmShape&, double, int);
template double measure_gemm_flops<kx::bf16>(const GemmShape&, double, int);
template double measure_gemm_flops<kx::fp16>(const GemmShape&, double, int);

template <class T>
double measure_gemm_flops(const GemmShape& g, double min_seconds, int min_runs) {
  const kx::ExecSpace exec;
  const std::int64_t k = g.k;
  kernels::Matrix<T> A("gemm_peak.A", g.m, g.k), B("gemm_peak.B", g.n, g.k), C("gemm_peak.C", g.m, g.n);
  // Small, varied values: no denormals, no special cases a BLAS could shortcut.
  Kokkos::parallel_for(
      "tptrain::gemm_peak::fill", Kokkos::RangePolicy<kx::ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, g.m),
      KOKKOS_LAMBDA(const std::int64_t i) {
        for (std::int64_t j = 0; j < k; ++j) A(i, j) = 0.001f * float((i * 7 + j * 13) % 17 + 1);
      });
  Kokkos::parallel_for(
      "tptrain::gemm_peak::fill", Kokkos::RangePolicy<kx::ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, g.n),
      KOKKOS_LAMBDA(const std::int64_t i) {
        for (std::int64_t j = 0; j < k; ++j) B(i, j) = 0.001f * float((i * 11 + j * 5) % 19 + 1);
      });
  kernels::linear_forward(exec, A, B, C);  // untimed: first-touch, BLAS thread start-up
  kx::fence(exec, "tptrain::gemm_peak");
  double best = 0.0, total = 0.0;
  for (int run = 0; run < min_runs || total < min_seconds; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    kernels::linear_forward(exec, A, B, C);
    kx::fence(exec, "tptrain::gemm_peak");
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += dt;
    if (dt > 0 && g.flops() / dt > best) best = g.flops() / dt;
  }
  return best;
}

}  // namespace tptrain::driver
