// A machine description file (input/machines/*.toml; docs/planning.md, "The machine file"): the
// figures of a device, a node and the network that `tptrain plan` simulates a step on, and that
// `tptrain bench --calibrate` writes for the machine it runs on. Read and checked here, where
// every TOML file of tptrain is read (toml++ is compiled by the host compiler only); the model of
// time that uses them is src/plan/. Units are in the key names.
//
// A key the schema does not know, a missing required key, a value of the wrong type or out of its
// range: std::invalid_argument naming the file, the line, the key and what was expected.
#pragma once

#include <string>
#include <vector>

namespace tptrain::io {

// One measured GEMM: achieved / peak for C[m, n] = A[m, k]·B[k, n] in `precision`.
struct MeasuredGemm {
  std::string precision;  // "bf16", "fp16", "fp32"
  double m = 0, n = 0, k = 0;
  double efficiency = 0;
  std::string comment;  // written above it (machine_file_toml): which GEMM this is
};

// One measured flash attention core: achieved / peak, forward and backward, for calls of `length`
// queries against as many keys (FLOPs as model::attention_flops_per_sequence counts them): ring
// attention's chunk pairs run at their own length, shorter than the sequence.
struct MeasuredAttention {
  std::string precision;
  double length = 0;
  double efficiency = 0;
  std::string comment;
};

struct MachineFile {
  std::string path;  // where it was read from ("(built in)" for the default)
  // [machine]
  std::string name;
  std::string source;
  // [device]
  std::string device_name;
  double peak_tflops_bf16 = 0, peak_tflops_fp16 = 0, peak_tflops_fp32 = 0;  // dense, per device
  double memory_gib = 0;
  double memory_bandwidth_gbs = 0;  // 1e9 bytes/s
  int compute_units = 1;
  double kernel_overhead_us = 0;    // optional: time every kernel adds (launch, synchronisation)
  // optional: bytes/s (1e9) of tptrain's memory-bound kernels (norms, activations) as the planner
  // counts their bytes; 0: memory_bandwidth_gbs (the triad) times them
  double kernel_bandwidth_gbs = 0;
  // optional: bytes/s (1e9) of the optimizer step's kernels (AdamW, the gradient norm, zero_grad)
  // as the planner counts their bytes; 0: kernel_bandwidth_gbs (or the triad) times them
  double optimizer_bandwidth_gbs = 0;
  // [node]
  int devices = 1;
  double link_bandwidth_gbs = 0;    // per device, per direction
  double link_latency_us = 0;
  // optional: the bus bandwidth (nccl-tests' busBw, per device) the communication library's
  // collectives reach inside the node; 0: link_bandwidth_gbs (point to point always takes that)
  double collective_bandwidth_gbs = 0;
  // optional, in [0, 1]: the share of a collective's (or a ring attention transfer's) time the
  // rank's host spends driving it, computing nothing meanwhile (MPI without a progress thread
  // moves the bytes inside its calls: 1; NCCL, on its own stream: 0, the default)
  double communication_host_share = 0;
  // optional, in (0, 1]: the share of a processor core each of the node's `devices` ranks holds
  // while all of them compute (a CPU node with more ranks than cores); the file's rates are at
  // that share, and a rank computing while others wait runs faster (1, the default: no sharing)
  double rank_time_share = 1;
  // [network]
  double network_bandwidth_gbs = 0;  // per device, per direction
  double network_latency_us = 0;
  // [gemm]
  double max_efficiency = 0;
  int tile_m = 1, tile_n = 1;
  double attention_efficiency = 0;  // optional, of the peak; 0 in the file: 0.6 x max_efficiency
  std::vector<MeasuredGemm> measured;
  std::vector<MeasuredAttention> measured_attention;  // [[gemm.measured_attention]]
  // Comment lines written above each section (machine_file_toml): where its figures come from.
  // The reader leaves them empty.
  std::string device_note, node_note, network_note, gemm_note;
};

// The file's text, as `bench --calibrate` writes it: every key of the schema, each section after
// its note as comment lines; the optional kernel_overhead_us, kernel_bandwidth_gbs,
// optimizer_bandwidth_gbs, collective_bandwidth_gbs, communication_host_share and
// attention_efficiency when positive (0 reads as their default), rank_time_share when below 1.
// Numbers as TOML floats (3.0, not 3) of 6 significant digits, which parse_machine_file reads back.
std::string machine_file_toml(const MachineFile& m);

// Reads and checks `path`.
MachineFile read_machine_file(const std::string& path);
// The same from text (`source` names it in messages).
MachineFile parse_machine_file(const std::string& text, const std::string& source);

}  // namespace tptrain::io
