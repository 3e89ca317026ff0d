// The rate of the optimizer step's kernels: `bench --calibrate`'s [device] optimizer_bandwidth_gbs,
// what the planner times a step's AdamW update and its two passes over the gradients at
// (src/plan/step_simulation.cpp). tptrain's own kernels run on one flat fp32 bucket of the rank's
// parameters: bucket_adamw_update (28 bytes per parameter as the planner counts them: read w, g,
// m, v, write w, m, v), bucket_squared_norms (the gradient norm, 4) and the fill of zero_grad (4).
// On a CPU core AdamW is bound by its square root and two divisions per element, not by its bytes
// (2-3x slower per byte than the triad); on a GPU the three come near the HBM bandwidth.
#pragma once

#include <cstdint>

namespace tptrain::driver {

// Bytes/s (as counted above) of the median of several steps over `parameters` fp32 parameters, at
// least `min_runs` and `min_seconds` in all, after one untimed step.
double measure_optimizer_bytes_per_s(std::int64_t parameters, double min_seconds = 0.2, int min_runs = 3);

}  // namespace tptrain::driver
