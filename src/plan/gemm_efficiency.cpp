#include "src/plan/gemm_efficiency.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tptrain::plan {

namespace {

double modelled(const Machine& machine, const GemmShape& g) {
  const double tm = machine.tile_m, tn = machine.tile_n, units = machine.compute_units;
  const double tiles = std::ceil(g.m / tm) * std::ceil(g.n / tn);
  const double waves = std::ceil(tiles / units);
  const double quantisation = (g.m * g.n) / (waves * units * tm * tn);
  return machine.max_efficiency * std::min(1.0, quantisation);
}

}  // namespace

double gemm_efficiency(const Machine& machine, const std::string& precision, const GemmShape& g) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) return machine.max_efficiency;
  const double model = modelled(machine, g);
  const io::MeasuredGemm* nearest = nullptr;
  double best = std::numeric_limits<double>::infinity();
  for (const io::MeasuredGemm& row : machine.measured) {
    if (row.precision != precision) continue;
    const double d = std::pow(std::log(row.m / g.m), 2) + std::pow(std::log(row.n / g.n), 2) +
                     std::pow(std::log(row.k / g.k), 2);
    if (d < best) best = d, nearest = &row;
  }
  if (!nearest) return model;
  const double at_measured = modelled(machine, GemmShape{nearest->m, nearest->n, nearest->k});
  return std::min(1.0, model * nearest->efficiency / at_measured);
}

double gemm_seconds(const Machine& machine, const std::string& precision, const GemmShape& g, double element_bytes) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) return 0;
  const double flops = 2.0 * g.m * g.n * g.k;
  const double compute = flops / (peak_flops(machine, precision) * gemm_efficiency(machine, precision, g));
  const double bytes = (g.m * g.k + g.k * g.n + g.m * g.n) * element_bytes;
  const double memory = bytes / (machine.memory_bandwidth_gbs * 1e9);
  return std::max(compute, memory) + machine.kernel_overhead_us * 1e-6;
}

double memory_seconds(const Machine& machine, double bytes) {
  const double bandwidth = machine.kernel_bandwidth_gbs > 0 ? machine.kernel_bandwidth_gbs : machine.memory_bandwidth_gbs;
  return bytes / (bandwidth * 1e9) + machine.kernel_overhead_us * 1e-6;
}

double optimizer_seconds(const Machine& machine, double bytes) {
  if (machine.optimizer_bandwidth_gbs <= 0) return memory_seconds(machine, bytes);
  return bytes / (machine.optimizer_bandwidth_gbs * 1e9) + machine.kernel_overhead_us * 1e-6;
}

}  // namespace tptrain::plan
