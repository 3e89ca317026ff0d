// The GEMM rate this rank reaches, measured in the running process with the same GEMM seam the
// model uses (kernels::linear_forward → KokkosBlas → OpenBLAS / cuBLAS): the denominator of
// MFU. Measured on the model's own largest GEMM and on a square 2048 one; every rank measures
// at the same time (as in training, ranks share cores, caches and memory bandwidth).
#pragma once

#include <cstdint>
#include <vector>

#include "src/driver/run_rate.hpp"
#include "src/model/spec/gpt_shape.hpp"

namespace tptrain::driver {

// Which GEMM of a linear layer (kokkos_kernels/gemm.hpp), each as C[m, n] over an inner k:
//   forward          y = x·Wᵀ:   m = tokens, n = out, k = in
//   backward_input   dx = dy·W:  m = tokens, n = in, k = out
//   backward_weight  dW += dyᵀ·x: m = out, n = in, k = tokens
// (the shapes the planner times a layer's forward and backward with).
enum class GemmPass { forward, backward_input, backward_weight };

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;  // C[m, n], inner dimension k
  const char* what = "";
  GemmPass pass = GemmPass::forward;
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

// The two backward GEMMs of the linear layer whose forward is `forward`.
GemmShape backward_input_of(const GemmShape& forward);
GemmShape backward_weight_of(const GemmShape& forward);

// The GEMMs of one micro-batch's forward of a block and the logits on one tensor-parallel rank:
// QKV, attention projection, MLP fc (gate|up), MLP projection, logits.
std::vector<GemmShape> model_gemms(const model::GptShape& shape, int micro_batch);

// The largest (by FLOPs) of them.
GemmShape largest_model_gemm(const model::GptShape& shape, int micro_batch);

// FLOP/s of several runs of g's GEMM (its pass: kernels::linear_forward, linear_backward_input or
// linear_backward_weight) with operands in T (float, kx::bf16, kx::fp16: the training precision;
// 16-bit GEMMs accumulate in fp32 as the model's do, dW in fp32), at least `min_runs` runs and
// `min_seconds` in all, after one untimed run: the best run's (bench's peak) or the median's
// (`bench --calibrate`; run_rate.hpp). With `evict_bytes` > 0 a buffer of that size is written
// before each run (untimed), so that the operands come from memory, not from the caches, as in a
// training step where other kernels ran since they were last touched (`bench --calibrate`); 0:
// hot operands, the best a shape can do.
template <class T = float>
double measure_gemm_flops(const GemmShape& g, double min_seconds = 0.3, int min_runs = 2,
                          std::int64_t evict_bytes = 0, RunStatistic statistic = RunStatistic::best);

}  // namespace tptrain::driver
