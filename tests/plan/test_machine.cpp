// Machine files (input/machines/*.toml, io/machine_file.hpp): the shipped files read, the built-in
// default equal to its file, and every error naming the file and the key.
#include "catch.hpp"

#include <string>

#include "src/plan/gemm_efficiency.hpp"
#include "src/plan/machine.hpp"

using namespace tptrain;
using namespace tptrain::plan;

namespace {

std::string machine_path(const std::string& name) { return std::string(TPTRAIN_SOURCE_DIR) + "/input/machines/" + name; }

const char* kValid = R"(
[machine]
name = "test"
source = "made up"
[device]
name = "d"
peak_tflops_bf16 = 100.0
peak_tflops_fp16 = 100
peak_tflops_fp32 = 10.0
memory_gib = 16.0
memory_bandwidth_gbs = 1000.0
compute_units = 4
[node]
devices = 2
link_bandwidth_gbs = 10.0
link_latency_us = 1.0
[network]
bandwidth_gbs = 1.0
latency_us = 2.0
[gemm]
max_efficiency = 0.5
tile_m = 16
tile_n = 16
[[gemm.measured]]
precision = "fp32"
m = 64
n = 64
k = 64
efficiency = 0.25
)";

std::string with(const std::string& from, const std::string& to) {
  std::string s = kValid;
  s.replace(s.find(from), from.size(), to);
  return s;
}

}  // namespace

TEST_CASE("machine files: the shipped ones read, the default equals its file", "[plan][machine]") {
  for (const char* name : {"dgx-a100-80gb.toml", "dgx-h100.toml", "h200.toml", "gh200.toml"}) {
    const Machine m = load_machine(machine_path(name));
    CHECK(m.peak_tflops_bf16 > 300);
    CHECK(!m.source.empty());
  }
  const Machine file = load_machine(machine_path("dgx-a100-80gb.toml"));
  const Machine built = dgx_a100_80gb();
  CHECK(file.name == built.name);
  CHECK(file.source == built.source);
  CHECK(file.device_name == built.device_name);
  CHECK(file.peak_tflops_bf16 == built.peak_tflops_bf16);
  CHECK(file.peak_tflops_fp16 == built.peak_tflops_fp16);
  CHECK(file.peak_tflops_fp32 == built.peak_tflops_fp32);
  CHECK(file.memory_gib == built.memory_gib);
  CHECK(file.memory_bandwidth_gbs == built.memory_bandwidth_gbs);
  CHECK(file.compute_units == built.compute_units);
  CHECK(file.kernel_overhead_us == built.kernel_overhead_us);
  CHECK(file.devices == built.devices);
  CHECK(file.link_bandwidth_gbs == built.link_bandwidth_gbs);
  CHECK(file.link_latency_us == built.link_latency_us);
  CHECK(file.network_bandwidth_gbs == built.network_bandwidth_gbs);
  CHECK(file.network_latency_us == built.network_latency_us);
  CHECK(file.max_efficiency == built.max_efficiency);
  CHECK(file.tile_m == built.tile_m);
  CHECK(file.tile_n == built.tile_n);
  CHECK(file.attention_efficiency == built.attention_efficiency);
  CHECK(file.measured.empty());
}

TEST_CASE("machine files: a valid file, with the optional keys", "[plan][machine]") {
  const Machine m = io::parse_machine_file(kValid, "cpu.toml");
  CHECK(m.peak_tflops_fp16 == 100);
  CHECK(m.kernel_overhead_us == 0);       // optional, default 0
  CHECK(attention_efficiency(m) == Approx(0.3));  // default 0.6 x max_efficiency
  REQUIRE(m.measured.size() == 1);
  CHECK(m.measured[0].efficiency == 0.25);
  const Machine o = io::parse_machine_file(
      with("compute_units = 4", "compute_units = 4\nkernel_overhead_us = 7.5"), "cpu.toml");
  CHECK(o.kernel_overhead_us == 7.5);
  CHECK(m.kernel_bandwidth_gbs == 0);  // optional: memory_bandwidth_gbs times the memory-bound kernels
  const Machine k = io::parse_machine_file(
      with("compute_units = 4", "compute_units = 4\nkernel_bandwidth_gbs = 2.5"), "cpu.toml");
  CHECK(k.kernel_bandwidth_gbs == 2.5);
  CHECK(m.optimizer_bandwidth_gbs == 0);  // optional: the memory-bound kernels' rate times the optimizer
  const Machine opt = io::parse_machine_file(
      with("compute_units = 4", "compute_units = 4\noptimizer_bandwidth_gbs = 1.5"), "cpu.toml");
  CHECK(opt.optimizer_bandwidth_gbs == 1.5);
  CHECK(io::parse_machine_file(io::machine_file_toml(opt), "again.toml").optimizer_bandwidth_gbs == 1.5);
  // [node]'s optional collective figures: absent, the link's bandwidth and no host share.
  CHECK(m.collective_bandwidth_gbs == 0);
  CHECK(m.communication_host_share == 0);
  const std::string node = "link_latency_us = 1.0\ncollective_bandwidth_gbs = 4.5\ncommunication_host_share = 1.0";
  const Machine mpi = io::parse_machine_file(with("link_latency_us = 1.0", node), "cpu.toml");
  CHECK(mpi.collective_bandwidth_gbs == 4.5);
  CHECK(mpi.communication_host_share == 1.0);
  const Machine mpi_again = io::parse_machine_file(io::machine_file_toml(mpi), "again.toml");
  CHECK(mpi_again.collective_bandwidth_gbs == 4.5);
  CHECK(mpi_again.communication_host_share == 1.0);
  CHECK_THROWS_WITH(io::parse_machine_file(with("link_latency_us = 1.0", "link_latency_us = 1.0\ncommunication_host_share = 1.5"),
                                           "cpu.toml"),
                    Catch::Contains("node.communication_host_share") && Catch::Contains("[0, 1]"));
  // rank_time_share: absent, every rank holds its core (1); a share of a core in (0, 1].
  CHECK(m.rank_time_share == 1);
  const Machine shared = io::parse_machine_file(with("link_latency_us = 1.0", "link_latency_us = 1.0\nrank_time_share = 0.5"), "cpu.toml");
  CHECK(shared.rank_time_share == 0.5);
  CHECK(io::parse_machine_file(io::machine_file_toml(shared), "again.toml").rank_time_share == 0.5);
  CHECK(io::machine_file_toml(m).find("rank_time_share") == std::string::npos);
  CHECK_THROWS_WITH(io::parse_machine_file(with("link_latency_us = 1.0", "link_latency_us = 1.0\nrank_time_share = 1.5"), "cpu.toml"),
                    Catch::Contains("node.rank_time_share") && Catch::Contains("(0, 1]"));
}

TEST_CASE("machine files: the attention core's efficiency by length, between measured rows", "[plan][machine]") {
  const std::string rows = "efficiency = 0.25\n"
                           "[[gemm.measured_attention]]\nprecision = \"fp32\"\nlength = 128\nefficiency = 0.4\n"
                           "[[gemm.measured_attention]]\nprecision = \"fp32\"\nlength = 32\nefficiency = 0.2\n";
  const Machine m = io::parse_machine_file(with("efficiency = 0.25\n", rows), "cpu.toml");
  REQUIRE(m.measured_attention.size() == 2);
  CHECK(attention_efficiency(m, "fp32", 128) == Approx(0.4));
  CHECK(attention_efficiency(m, "fp32", 32) == Approx(0.2));
  CHECK(attention_efficiency(m, "fp32", 64) == Approx(0.3));   // halfway in log length
  CHECK(attention_efficiency(m, "fp32", 16) == Approx(0.2));   // the nearest row's outside them
  CHECK(attention_efficiency(m, "fp32", 512) == Approx(0.4));
  CHECK(attention_efficiency(m, "bf16", 64) == Approx(0.3));   // no bf16 rows: 0.6 x max_efficiency
  // What bench --calibrate writes reads back.
  const Machine again = io::parse_machine_file(io::machine_file_toml(m), "again.toml");
  REQUIRE(again.measured_attention.size() == 2);
  CHECK(again.measured_attention[1].length == 32);
  CHECK(again.measured_attention[1].efficiency == 0.2);
  CHECK_THROWS_WITH(io::parse_machine_file(with("efficiency = 0.25\n", rows + "[[gemm.measured_attention]]\n"
                                                "precision = \"fp32\"\nlength = 0\nefficiency = 0.2\n"),
                                           "cpu.toml"),
                    Catch::Contains("gemm.measured_attention.length"));
}

TEST_CASE("a memory-bound kernel runs at kernel_bandwidth_gbs where the file has it, the optimizer's at "
          "optimizer_bandwidth_gbs",
          "[plan][machine]") {
  Machine m = io::parse_machine_file(kValid, "cpu.toml");
  m.memory_bandwidth_gbs = 20;
  m.kernel_overhead_us = 1;
  // 1e8 bytes at the triad's 20 GB/s: 5 ms, and the 1 us launch.
  CHECK(memory_seconds(m, 1e8) == Approx(0.005 + 1e-6));
  // At a measured 4 GB/s for tptrain's own kernels: 25 ms.
  m.kernel_bandwidth_gbs = 4;
  CHECK(memory_seconds(m, 1e8) == Approx(0.025 + 1e-6));
  // The optimizer's kernels at that rate too, until the file measures theirs: 2 GB/s, 50 ms.
  CHECK(optimizer_seconds(m, 1e8) == Approx(0.025 + 1e-6));
  m.optimizer_bandwidth_gbs = 2;
  CHECK(optimizer_seconds(m, 1e8) == Approx(0.05 + 1e-6));
  CHECK(memory_seconds(m, 1e8) == Approx(0.025 + 1e-6));
  // A GEMM's roofline still reads memory at the triad: 1 x 1 x 1e7 in fp32 moves 8e7 bytes (A and
  // B), memory-bound at a 100 TFLOP/s peak: 4 ms at 20 GB/s, not 20 ms at 4.
  m.peak_tflops_fp32 = 100;
  m.measured.clear();
  CHECK(gemm_seconds(m, "fp32", GemmShape{1, 1, 1e7}, 4) == Approx((4.0 * (1e7 + 1e7 + 1) / 20e9) + 1e-6).epsilon(1e-3));
}

TEST_CASE("machine files: errors name the file and the key", "[plan][machine]") {
  const auto fails = [](const std::string& text, const std::string& expected) {
    CHECK_THROWS_WITH(io::parse_machine_file(text, "cpu.toml"), Catch::Contains(expected));
  };
  fails(with("tile_n = 16", "tile_n = 16\ntile_k = 4"), "cpu.toml:24: gemm.tile_k: unknown key");
  fails(with("latency_us = 2.0", ""), "cpu.toml: network.latency_us: missing (expected a number)");
  fails(with("memory_gib = 16.0", "memory_gib = \"16\""), "cpu.toml:10: device.memory_gib: expected a number");
  fails(with("max_efficiency = 0.5", "max_efficiency = 1.5"), "gemm.max_efficiency = 1.5: expected a fraction");
  fails(with("devices = 2", "devices = 0"), "node.devices: expected a positive integer");
  fails(with("precision = \"fp32\"", "precision = \"fp8\""), "gemm.measured.precision = \"fp8\"");
  fails(with("[network]", "[netwrk]"), "cpu.toml:17: netwrk: unknown section");
  fails(with("[machine]", "[machine"), "cpu.toml:2:");
  CHECK_THROWS_WITH(load_machine("/nonexistent/m.toml"), Catch::Contains("/nonexistent/m.toml: cannot read"));
}
