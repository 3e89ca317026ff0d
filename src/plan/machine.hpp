// The machine a step is simulated on (docs/planning.md, "The machine file"): a device's peaks,
// memory and compute units, the node's link, the network, the GEMM efficiency model's figures.
// Read from input/machines/*.toml (io/machine_file.hpp reads and checks the file); the default,
// a DGX A100 80 GB, is built in with the figures of input/machines/dgx-a100-80gb.toml, so that
// `tptrain plan` needs no file beside the executable.
#pragma once

#include <string>

#include "io/machine_file.hpp"

namespace tptrain::plan {

using Machine = io::MachineFile;

// input/machines/dgx-a100-80gb.toml, built in (tests/plan/test_machine.cpp holds the two equal).
Machine dgx_a100_80gb();

// Reads and checks a machine file (std::invalid_argument naming the file and key).
Machine load_machine(const std::string& path);

// Dense peak of one device for training.precision ("fp32", "bf16", "fp16"), in FLOP/s.
double peak_flops(const Machine& m, const std::string& precision);

// The attention core's share of the peak: [gemm] attention_efficiency, or 0.6 x max_efficiency
// when the file does not give it (flash attention's kernels reach about 60 % of what a large GEMM
// does: their inner products are head_dim = 64-128 long and the softmax runs between them).
double attention_efficiency(const Machine& m);
// ... for flash calls of `length` queries and keys in `precision`: with [[gemm.measured_attention]]
// rows of the precision, linear in log length between the two rows around it (the nearest row's
// outside them); without, attention_efficiency(m).
double attention_efficiency(const Machine& m, const std::string& precision, double length);

}  // namespace tptrain::plan
