#include "src/driver/gemm_peak.hpp"

#include <algorithm>
#include <chrono>
#include <functional>

#include "kokkos_kernels/gemm.hpp"
#include "kokkos_kernels/precision.hpp"
#include "kokkos_kernels/views.hpp"
#include "src/driver/run_rate.hpp"
#include "src/model/spec/sublayer_kinds.hpp"

namespace tptrain::driver {

std::vector<GemmShape> model_gemms(const model::GptShape& s, int micro_batch) {
  const std::int64_t N = std::int64_t(micro_batch) * s.seq_length, H = s.hidden;
  return {
      {N, s.local_qkv_width(), H, "attention QKV"},
      {N, H, s.local_hidden(), "attention projection"},
      {N, model::mlp_fc_rows(s) / s.tensor, H, model::mlp_kind(s).mlp.gated ? "MLP gate|up" : "MLP fc"},
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

GemmShape backward_input_of(const GemmShape& f) { return {f.m, f.k, f.n, f.what, GemmPass::backward_input}; }
GemmShape backward_weight_of(const GemmShape& f) { return {f.n, f.k, f.m, f.what, GemmPass::backward_weight}; }

// Small, varied values: no denormals, no special cases a BLAS could shortcut. (Not in an unnamed
// namespace: nvcc takes no extended lambda in a function template there.)
template <class V>
void fill_gemm_operand(const kx::ExecSpace& exec, const V& a, const std::int64_t salt) {
  const std::int64_t cols = std::int64_t(a.extent(1));
  Kokkos::parallel_for(
      "tptrain::gemm_peak::fill",
      Kokkos::RangePolicy<kx::ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, std::int64_t(a.extent(0))),
      KOKKOS_LAMBDA(const std::int64_t i) {
        for (std::int64_t j = 0; j < cols; ++j) a(i, j) = 0.001f * float((i * salt + j * 13) % 17 + 1);
      });
}

template double measure_gemm_flops<float>(const GemmShape&, double, int, std::int64_t, RunStatistic);
template double measure_gemm_flops<kx::bf16>(const GemmShape&, double, int, std::int64_t, RunStatistic);
template double measure_gemm_flops<kx::fp16>(const GemmShape&, double, int, std::int64_t, RunStatistic);

// Writes `value` over `evict` (a buffer larger than the caches). (A named function, not a lambda:
// nvcc takes no extended lambda inside a lambda.)
void evict_gemm_operands(const kx::ExecSpace& exec, const kernels::Vector<float>& evict, const float value) {
  Kokkos::parallel_for(
      "tptrain::gemm_peak::evict",
      Kokkos::RangePolicy<kx::ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, std::int64_t(evict.extent(0))),
      KOKKOS_LAMBDA(const std::int64_t i) { evict(i) = value; });
  kx::fence(exec, "tptrain::gemm_peak::evict");
}

template <class T>
double measure_gemm_flops(const GemmShape& g, double min_seconds, int min_runs, std::int64_t evict_bytes,
                          RunStatistic statistic) {
  const kx::ExecSpace exec;
  const std::int64_t evict_floats = std::max<std::int64_t>(0, evict_bytes / std::int64_t(sizeof(float)));
  kernels::Vector<float> evict("gemm_peak.evict", static_cast<std::size_t>(evict_floats));
  // Operands by pass (gemm_peak.hpp): A the left factor as stored, B the right, C the product.
  kernels::Matrix<T> A, B, C;
  kernels::Matrix<kx::acc_t<T>> dW;
  std::function<void()> gemm;
  if (g.pass == GemmPass::forward) {
    A = kernels::Matrix<T>("gemm_peak.x", g.m, g.k), B = kernels::Matrix<T>("gemm_peak.W", g.n, g.k);
    C = kernels::Matrix<T>("gemm_peak.y", g.m, g.n);
    gemm = [&] { kernels::linear_forward(exec, A, B, C); };
  } else if (g.pass == GemmPass::backward_input) {
    A = kernels::Matrix<T>("gemm_peak.dy", g.m, g.k), B = kernels::Matrix<T>("gemm_peak.W", g.k, g.n);
    C = kernels::Matrix<T>("gemm_peak.dx", g.m, g.n);
    gemm = [&] { kernels::linear_backward_input(exec, A, B, C); };
  } else {
    A = kernels::Matrix<T>("gemm_peak.dy", g.k, g.m), B = kernels::Matrix<T>("gemm_peak.x", g.k, g.n);
    dW = kernels::Matrix<kx::acc_t<T>>("gemm_peak.dW", g.m, g.n);
    gemm = [&] { kernels::linear_backward_weight(exec, A, B, dW); };
  }
  fill_gemm_operand(exec, A, 7);
  fill_gemm_operand(exec, B, 11);
  gemm();  // untimed: first-touch, BLAS thread start-up
  kx::fence(exec, "tptrain::gemm_peak");
  float run = 0;
  const auto evict_caches = [&] {
    if (evict_floats > 0) evict_gemm_operands(exec, evict, run++);
  };
  return rate_of_runs(g.flops(), min_runs, min_seconds, statistic,
                      [&] {
                        gemm();
                        kx::fence(exec, "tptrain::gemm_peak");
                      },
                      evict_caches);
}

}  // namespace tptrain::driver
