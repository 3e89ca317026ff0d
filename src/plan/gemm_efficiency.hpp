// How long a GEMM takes on a machine (docs/planning.md, "GEMMs"): C[m, n] = A[m, k]·B[k, n],
// 2·m·n·k FLOPs, moving at least (m·k + k·n + m·n) elements through device memory.
//
//   compute  = 2mnk / (peak · efficiency)
//   memory   = bytes / memory bandwidth                      (the roofline: the slower wins)
//   efficiency = max_efficiency · quantisation, quantisation = m·n / (waves · units · tile_m · tile_n)
//
// where the output is cut into ⌈m/tile_m⌉·⌈n/tile_n⌉ tiles, one compute unit computes one tile
// at a time, so they run in waves = ⌈tiles / units⌉ and the last wave's idle units and the tiles'
// padding are lost (NVIDIA, "Matrix Multiplication Background User's Guide": tile and wave
// quantisation). With measured rows for the precision ([[gemm.measured]]), the nearest measured
// shape (in log m, log n, log k) corrects the model: efficiency · measured / modelled at that
// shape, capped at 1, so a measured shape is predicted as measured and a shape near it follows
// the model's slope.
#pragma once

#include <string>

#include "src/plan/machine.hpp"

namespace tptrain::plan {

struct GemmShape {
  double m = 0, n = 0, k = 0;
};

// The modelled share of the peak (no roofline), with the measured correction.
double gemm_efficiency(const Machine& machine, const std::string& precision, const GemmShape& g);

// Seconds for one GEMM: the roofline of its compute at gemm_efficiency and its bytes moved at the
// memory bandwidth, plus the device's kernel overhead. `element_bytes` of A, B and C.
double gemm_seconds(const Machine& machine, const std::string& precision, const GemmShape& g, double element_bytes);

// Seconds for a memory-bound kernel that moves `bytes` (reads and writes), plus the kernel overhead:
// at [device] kernel_bandwidth_gbs where the file has it (what tptrain's own norm and activation
// kernels were measured to reach per byte: on a CPU core their arithmetic, not DRAM, bounds
// them), else at memory_bandwidth_gbs.
double memory_seconds(const Machine& machine, double bytes);
// The same for the optimizer step's kernels (AdamW, the gradient norm, zero_grad): at [device]
// optimizer_bandwidth_gbs where the file has it (on a CPU core AdamW's square root and divisions
// bound it), else as memory_seconds.
double optimizer_seconds(const Machine& machine, double bytes);

}  // namespace tptrain::plan
