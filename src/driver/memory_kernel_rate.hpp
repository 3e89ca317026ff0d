// The rate of tptrain's memory-bound kernels: `bench --calibrate`'s [device]
// kernel_bandwidth_gbs, what the planner's memory_seconds times norms and activations at. The
// block's own kernels (LayerNorm forward and backward, bias-GELU forward and its backward) run on
// a micro-batch of a model's rows, and their time is set against the bytes the planner counts for
// them (src/plan/block_time.cpp: a norm 2·rows·h·e forward and twice that backward, the GELU
// 2·rows·f·e forward and twice that backward). On a CPU core these kernels are bound by their
// arithmetic (a reduction, a division and a square root per row, a tanh per element), several
// times slower per byte than the STREAM triad; on a GPU they come near the HBM bandwidth.
#pragma once

#include <cstdint>

namespace tptrain::driver {

// Bytes/s (as counted above) of the median of several passes over [rows, hidden] and [rows, ffn]
// activations in precision T (float, kx::bf16, kx::fp16), at least `min_runs` and `min_seconds`
// in all, after one untimed pass.
template <class T>
double measure_memory_kernel_bytes_per_s(std::int64_t rows, std::int64_t hidden, std::int64_t ffn,
                                         double min_seconds = 0.2, int min_runs = 3);

}  // namespace tptrain::driver
