#include "src/driver/machine_toml.hpp"

#include <fmt/format.h>

#include "io/deck_text.hpp"

namespace tptrain::driver {

namespace {

// Each line of `note` as a comment line.
std::string comment(const std::string& note) {
  std::string out;
  std::size_t from = 0;
  while (from < note.size()) {
    std::size_t to = note.find('\n', from);
    if (to == std::string::npos) to = note.size();
    out += "# " + note.substr(from, to - from) + "\n";
    from = to + 1;
  }
  return out;
}

// A TOML float always (3.0, not 3: a reader may insist on the type), 6 significant digits.
std::string num(double x) {
  std::string s = fmt::format("{:.6g}", x);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

std::string machine_toml(const MachineFile& m) {
  using io::toml_string;
  std::string t;
  t += "[machine]\n";
  t += "name = " + toml_string(m.name) + "\n";
  t += "source = " + toml_string(m.source) + "\n\n";
  t += comment(m.device_note);
  t += "[device]\n";
  t += "name = " + toml_string(m.device_name) + "\n";
  t += "peak_tflops_bf16 = " + num(m.peak_tflops_bf16) + "\n";
  t += "peak_tflops_fp16 = " + num(m.peak_tflops_fp16) + "\n";
  t += "peak_tflops_fp32 = " + num(m.peak_tflops_fp32) + "\n";
  t += "memory_gib = " + num(m.memory_gib) + "\n";
  t += "memory_bandwidth_gbs = " + num(m.memory_bandwidth_gbs) + "\n";
  t += fmt::format("compute_units = {}\n", m.compute_units);
  if (m.kernel_overhead_us >= 0) t += "kernel_overhead_us = " + num(m.kernel_overhead_us) + "\n";
  t += "\n";
  t += comment(m.node_note);
  t += "[node]\n";
  t += fmt::format("devices = {}\n", m.node_devices);
  t += "link_bandwidth_gbs = " + num(m.link_bandwidth_gbs) + "\n";
  t += "link_latency_us = " + num(m.link_latency_us) + "\n\n";
  t += comment(m.network_note);
  t += "[network]\n";
  t += "bandwidth_gbs = " + num(m.network_bandwidth_gbs) + "\n";
  t += "latency_us = " + num(m.network_latency_us) + "\n\n";
  t += comment(m.gemm_note);
  t += "[gemm]\n";
  t += "max_efficiency = " + num(m.max_efficiency) + "\n";
  t += fmt::format("tile_m = {}\ntile_n = {}\n", m.tile_m, m.tile_n);
  if (m.attention_efficiency > 0) t += "attention_efficiency = " + num(m.attention_efficiency) + "\n";
  for (const MeasuredGemm& g : m.measured) {
    t += "\n";
    if (!g.comment.empty()) t += comment(g.comment);
    t += "[[gemm.measured]]\n";
    t += "precision = " + toml_string(g.precision) + "\n";
    t += fmt::format("m = {}\nn = {}\nk = {}\n", g.m, g.n, g.k);
    t += "efficiency = " + num(g.efficiency) + "\n";
  }
  return t;
}

}  // namespace tptrain::driver
