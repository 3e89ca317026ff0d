// What a machine file says of the device a rank runs on, read from the system rather than
// measured: its name, its memory and its compute units. On a CPU the "device" is one rank: its
// name is the CPU model (/proc/cpuinfo "model name"), its memory the node's (/proc/meminfo
// MemTotal) shared by the node's ranks, one compute unit. On a CUDA GPU, cudaGetDeviceProperties:
// the name, global memory and streaming multiprocessors.
#pragma once

#include <cstdint>
#include <string>

namespace tptrain::driver {

struct DeviceFacts {
  std::string name;        // "" when unknown
  std::string cpu_model;   // the host's CPU model ("" when /proc/cpuinfo has none)
  double memory_bytes = 0;  // per device (CPU: per rank)
  int compute_units = 1;
};

// `ranks_in_node`: the ranks sharing this node (a CPU's memory is divided among them).
DeviceFacts device_facts(int ranks_in_node);

// The first "model name" of a /proc/cpuinfo text ("" if none); the MemTotal of a /proc/meminfo
// text in bytes (0 if none). Apart, to be tested on given texts.
std::string cpu_model_of(const std::string& cpuinfo);
double mem_total_bytes_of(const std::string& meminfo);

}  // namespace tptrain::driver
