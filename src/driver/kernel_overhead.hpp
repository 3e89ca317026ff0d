// The time a kernel adds beyond its work: `bench --calibrate`'s [device] kernel_overhead_us, what
// the planner adds to every kernel it times. Many launches of a one-element kernel back to back,
// fenced once at the end (as a training step queues its kernels), over their number: on a GPU the
// launch throughput, on a CPU the cost of a Kokkos parallel dispatch.
#pragma once

namespace tptrain::driver {

// Microseconds per launch, the best of `trials` batches of `launches`.
double measure_kernel_overhead_us(int launches = 2000, int trials = 5);

}  // namespace tptrain::driver
