// The FLOP rate of the flash attention core (kokkos_kernels/flash_attention.hpp), forward and
// backward of one micro-batch of one layer, measured on synthetic Q, K, V: `bench --calibrate`'s
// [gemm] attention_efficiency (this rate over the GEMM peak) and, at the deck's sequence and ring
// attention's chunk lengths, its [[gemm.measured_attention]] rows. FLOPs as the model counts the
// executed ones (model::attention_flops_per_sequence: flash's causal skip at its block size), so
// that the planner, which counts them the same way, gets the measured time back.
#pragma once

#include "src/model/spec/gpt_shape.hpp"

namespace tptrain::driver {

// FLOP/s of the median of several forward + backward passes over `micro_batch` sequences of
// `shape` (its local heads, head_dim, seq_length; T the storage type), at least `min_runs` and
// `min_seconds` in all, after one untimed pass.
template <class T = float>
double measure_attention_flops(const model::GptShape& shape, int micro_batch, double min_seconds = 0.1,
                               int min_runs = 2);

}  // namespace tptrain::driver
