#include "src/driver/attention_rate.hpp"

#include "kokkos_kernels/flash_attention.hpp"
#include "kokkos_kernels/precision.hpp"
#include "kokkos_kernels/views.hpp"
#include "src/model/model_flops.hpp"
#include "src/driver/run_rate.hpp"

namespace tptrain::driver {

template double measure_attention_flops<float>(const model::GptShape&, int, double, int);
template double measure_attention_flops<kx::bf16>(const model::GptShape&, int, double, int);
template double measure_attention_flops<kx::fp16>(const model::GptShape&, int, double, int);

template <class T>
double measure_attention_flops(const model::GptShape& shape, int micro_batch, double min_seconds, int min_runs) {
  using F = kx::acc_t<T>;
  const kx::ExecSpace exec;
  const std::int64_t B = micro_batch, S = shape.seq_length, nh = shape.local_heads(), nkv = shape.local_kv_heads(),
                     d = shape.head_dim(), N = B * S, width = (nh + 2 * nkv) * d;
  kernels::Matrix<T> qkv("attention_rate.qkv", N, width), dqkv("attention_rate.dqkv", N, width),
      out("attention_rate.out", N, nh * d), dout("attention_rate.dout", N, nh * d);
  kernels::Vector<F> lse("attention_rate.lse", N * nh), delta("attention_rate.delta", N * nh);
  kernels::Matrix<F> dq_sum("attention_rate.dq_sum", N, nh * d);
  const kernels::Tokens no_documents;
  // Small, varied values: scores of order 1, no overflow in any precision.
  Kokkos::parallel_for(
      "tptrain::attention_rate::fill", Kokkos::RangePolicy<kx::ExecSpace, Kokkos::IndexType<std::int64_t>>(exec, 0, N),
      KOKKOS_LAMBDA(const std::int64_t i) {
        for (std::int64_t j = 0; j < width; ++j) qkv(i, j) = 0.01f * float((i * 7 + j * 13) % 17 - 8);
        for (std::int64_t j = 0; j < nh * d; ++j) dout(i, j) = 0.001f * float((i * 5 + j * 3) % 11 - 5);
      });
  const auto pass = [&] {
    kernels::flash_attention_forward(exec, qkv, out, lse, B, S, nh, nkv, d, no_documents);
    kernels::flash_attention_backward(exec, dout, qkv, out, lse, dqkv, no_documents, dq_sum, delta, B, S, nh, nkv, d);
    kx::fence(exec, "tptrain::attention_rate");
  };
  pass();  // untimed: first touch
  model::GptShape flash = shape;
  flash.flash_attention = true;
  const double flops = double(B) * model::attention_flops_per_sequence(flash, true);
  return rate_of_runs(flops, min_runs, min_seconds, RunStatistic::median, pass);
}

}  // namespace tptrain::driver
