#include "src/plan/machine.hpp"

#include <cmath>

namespace tptrain::plan {

Machine dgx_a100_80gb() {
  Machine m;
  m.path = "(built in: input/machines/dgx-a100-80gb.toml)";
  m.name = "DGX A100 80GB";
  m.source =
      "NVIDIA A100 Tensor Core GPU datasheet (2021); NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020); "
      "NVIDIA DGX A100 datasheet";
  m.device_name = "A100 SXM4 80 GB";
  m.peak_tflops_bf16 = 312.0;
  m.peak_tflops_fp16 = 312.0;
  m.peak_tflops_fp32 = 19.5;
  m.memory_gib = 80.0;
  m.memory_bandwidth_gbs = 2039.0;
  m.compute_units = 108;
  m.devices = 8;
  m.link_bandwidth_gbs = 300.0;
  m.link_latency_us = 3.0;
  m.network_bandwidth_gbs = 25.0;
  m.network_latency_us = 5.0;
  m.max_efficiency = 0.80;
  m.tile_m = 128;
  m.tile_n = 256;
  return m;
}

Machine load_machine(const std::string& path) { return io::read_machine_file(path); }

double peak_flops(const Machine& m, const std::string& precision) {
  if (precision == "bf16") return m.peak_tflops_bf16 * 1e12;
  if (precision == "fp16") return m.peak_tflops_fp16 * 1e12;
  return m.peak_tflops_fp32 * 1e12;
}

double attention_efficiency(const Machine& m) {
  return m.attention_efficiency > 0 ? m.attention_efficiency : 0.6 * m.max_efficiency;
}

double attention_efficiency(const Machine& m, const std::string& precision, double length) {
  const io::MeasuredAttention* below = nullptr;  // the longest row at or below `length`
  const io::MeasuredAttention* above = nullptr;  // the shortest row above it
  for (const io::MeasuredAttention& a : m.measured_attention) {
    if (a.precision != precision) continue;
    if (a.length <= length && (!below || a.length > below->length)) below = &a;
    if (a.length > length && (!above || a.length < above->length)) above = &a;
  }
  if (!below && !above) return attention_efficiency(m);
  if (!below || !above) return (below ? below : above)->efficiency;
  const double t = std::log(length / below->length) / std::log(above->length / below->length);
  return below->efficiency + t * (above->efficiency - below->efficiency);
}

}  // namespace tptrain::plan
