// The machine file (input/machines/*.toml, docs/planning.md, "The machine file") of a measured
// machine, as `bench --calibrate` writes it: every key of the schema, each section with a comment
// saying where its figures come from.
#pragma once

#include <string>
#include <vector>

namespace tptrain::driver {

struct MeasuredGemm {
  std::string precision;  // "fp32", "bf16", "fp16"
  long long m = 0, n = 0, k = 0;
  double efficiency = 0;   // achieved / the precision's peak
  std::string comment;     // which GEMM this is ("small: MLP fc")
};

struct MachineFile {
  std::string name, source;
  std::string device_name;
  double peak_tflops_bf16 = 0, peak_tflops_fp16 = 0, peak_tflops_fp32 = 0;
  double memory_gib = 0, memory_bandwidth_gbs = 0;
  int compute_units = 1;
  double kernel_overhead_us = -1;  // optional: written when >= 0
  int node_devices = 1;
  double link_bandwidth_gbs = 0, link_latency_us = 0;
  double network_bandwidth_gbs = 0, network_latency_us = 0;
  double max_efficiency = 0;
  int tile_m = 1, tile_n = 1;
  double attention_efficiency = 0;  // optional: written when > 0
  std::vector<MeasuredGemm> measured;
  // Comments above each section ("# ..." lines; may be empty).
  std::string device_note, node_note, network_note, gemm_note;
};

// The TOML text: [machine], [device], [node], [network], [gemm] (with the optional keys
// kernel_overhead_us and attention_efficiency when set), then a [[gemm.measured]] table per
// measured GEMM. Strings as TOML basic strings; numbers with enough digits to read back.
std::string machine_toml(const MachineFile& m);

}  // namespace tptrain::driver
