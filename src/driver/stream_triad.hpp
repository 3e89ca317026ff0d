// Memory bandwidth as STREAM's triad measures it (McCalpin, "STREAM: Sustainable Memory Bandwidth
// in High Performance Computers"): a(i) = b(i) + s c(i) over arrays far larger than the caches,
// counted as 3 x 8 bytes per element (two reads, one write; the write-allocate read not counted,
// as STREAM does not). On Kokkos Views in the execution space the model runs in, so on a GPU it is
// HBM and on a CPU the rank's share of the DRAM bandwidth when every rank measures at once.
#pragma once

#include <cstdint>

namespace tptrain::driver {

// Bytes/s of the best of several triads over `elements` doubles per array (at least `min_runs`
// and `min_seconds` in all, after one untimed run that touches the pages first).
double measure_triad_bytes_per_s(std::int64_t elements = std::int64_t(1) << 22, double min_seconds = 0.3,
                                 int min_runs = 3);

}  // namespace tptrain::driver
