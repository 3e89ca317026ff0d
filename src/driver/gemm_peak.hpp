// The GEMM rate this rank reaches, measured in the running process with the same GEMM seam the
// model uses (kernels::linear_forward → KokkosBlas → OpenBLAS / cuBLAS): the denominator of
// MFU. Measured on the model's own largest GEMM and on a square 2048 one; every rank measures
// at the same time (as in training, ranks share cores, caches and memory bandwidth).
#pragma once

#include <cstdint>
#include <vector>

#include "src/model/gpt_shape.hpp"

namespace tptrain::driver {

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;  // C[m, n] = A[m, k] · B[n, k]ᵀ (a linear layer's forward)
  const char* what = "";
  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
};

// The GEMMs of one micro-batch's forward of a block and the logits on one tensor-parallel rank:
// QKV, attention projection, MLP fc (gate|up), MLP projection, logits.
std::vector<GemmShape> model_gemms(const model::GptShape& shape, int micro_batch);

// The largest (by FLOPs) of them.
GemmShape largest_model_gemm(const model::GptShape& shape, int micro_batch);

// FLOP/s of the best of several runs of C = A·Bᵀ with A, B, C in T (float, kx::bf16, kx::fp16:
// the training precision; 16-bit GEMMs accumulate in fp32 as the model's do), at least
// `min_runs` runs and `min_seconds` in all, after one untimed run.
template <class T = float>
double measure_gemm_flops(const GemmShape& g, double min_seconds = 0.3, int min_runs = 2);

}  // namespace tptrain::driver
