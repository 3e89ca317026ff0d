// bench --calibrate's machine file text (io/machine_file.hpp, machine_file_toml), read back by
// the reader plan --machine uses, and the system facts it reads (src/driver/device_facts.hpp), on
// given texts.
#include <string>

#include "catch.hpp"
#include "src/driver/device_facts.hpp"
#include "src/driver/gemm_peak.hpp"
#include "io/machine_file.hpp"

using namespace tptrain;

TEST_CASE("the machine file has every key of the schema, floats as floats", "[bench]") {
  io::MachineFile m;
  m.name = "Xeon \"test\"";
  m.source = "measured";
  m.device_name = "one rank";
  m.peak_tflops_fp32 = 3.0;  // a whole number: still written as a TOML float
  m.peak_tflops_bf16 = 0.05;
  m.peak_tflops_fp16 = 0.04;
  m.memory_gib = 64;
  m.memory_bandwidth_gbs = 12.5;
  m.devices = 2;
  m.link_bandwidth_gbs = 6;
  m.link_latency_us = 0.75;
  m.network_bandwidth_gbs = 6;
  m.network_latency_us = 0.75;
  m.max_efficiency = 1;
  m.device_note = "first line\nsecond line";
  m.measured.push_back({"fp32", 2048, 384, 128, 0.625, "tiny: attention QKV"});
  CHECK(io::machine_file_toml(m).find("kernel_overhead_us") == std::string::npos);  // optional, 0: the default
  CHECK(io::machine_file_toml(m).find("attention_efficiency") == std::string::npos);
  m.kernel_overhead_us = 0.25;
  m.attention_efficiency = 0.2;
  const std::string t = io::machine_file_toml(m);
  INFO(t);
  for (const char* line :
       {"[machine]\n", "name = \"Xeon \\\"test\\\"\"\n", "source = \"measured\"\n", "[device]\n", "name = \"one rank\"\n",
        "peak_tflops_bf16 = 0.05\n", "peak_tflops_fp16 = 0.04\n", "peak_tflops_fp32 = 3.0\n", "memory_gib = 64.0\n",
        "memory_bandwidth_gbs = 12.5\n", "compute_units = 1\n", "[node]\n", "devices = 2\n", "link_bandwidth_gbs = 6.0\n",
        "link_latency_us = 0.75\n", "[network]\n", "bandwidth_gbs = 6.0\n", "latency_us = 0.75\n", "[gemm]\n",
        "max_efficiency = 1.0\n", "tile_m = 1\n", "tile_n = 1\n", "compute_units = 1\nkernel_overhead_us = 0.25\n",
        "tile_n = 1\nattention_efficiency = 0.2\n", "# first line\n# second line\n[device]\n",
        "# tiny: attention QKV\n[[gemm.measured]]\nprecision = \"fp32\"\nm = 2048\nn = 384\nk = 128\nefficiency = 0.625\n"})
    CHECK(t.find(line) != std::string::npos);
  // What plan --machine reads back is what was written.
  const io::MachineFile r = io::parse_machine_file(t, "calibrated.toml");
  CHECK(r.name == m.name);
  CHECK(r.peak_tflops_fp32 == 3.0);
  CHECK(r.peak_tflops_bf16 == 0.05);
  CHECK(r.devices == 2);
  CHECK(r.link_latency_us == 0.75);
  CHECK(r.kernel_overhead_us == 0.25);
  CHECK(r.attention_efficiency == 0.2);
  REQUIRE(r.measured.size() == 1);
  CHECK((r.measured[0].m == 2048 && r.measured[0].n == 384 && r.measured[0].k == 128));
  CHECK(r.measured[0].efficiency == 0.625);
}

TEST_CASE("the CPU model and the memory come from /proc texts", "[bench]") {
  CHECK(driver::cpu_model_of("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
                             "processor\t: 1\nmodel name\t: other\n") == "Intel(R) Xeon(R) Processor");
  CHECK(driver::cpu_model_of("processor\t: 0\n").empty());
  CHECK(driver::mem_total_bytes_of("MemTotal:        2048 kB\nMemFree:  1 kB\n") == 2048.0 * 1024);
  CHECK(driver::mem_total_bytes_of("") == 0.0);
}

TEST_CASE("a linear layer's backward GEMMs have the shapes the planner times", "[bench]") {
  // tiny's QKV: 16 x 128 tokens, in 128, out 384.
  const driver::GemmShape f{2048, 384, 128, "attention QKV"};
  const driver::GemmShape dx = driver::backward_input_of(f), dw = driver::backward_weight_of(f);
  CHECK((dx.m == 2048 && dx.n == 128 && dx.k == 384));  // dx[tokens, in] = dy[tokens, out]·W
  CHECK(dx.pass == driver::GemmPass::backward_input);
  CHECK((dw.m == 384 && dw.n == 128 && dw.k == 2048));  // dW[out, in] += dyᵀ·x over the tokens
  CHECK(dw.pass == driver::GemmPass::backward_weight);
  CHECK(dw.flops() == f.flops());
}
