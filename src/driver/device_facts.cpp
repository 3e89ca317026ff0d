#include "src/driver/device_facts.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

#include "kokkos_kernels/compat.hpp"

namespace tptrain::driver {

namespace {

std::string read_text(const char* path) {
  std::ifstream f(path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string trimmed(std::string s) {
  const auto first = s.find_first_not_of(" \t");
  const auto last = s.find_last_not_of(" \t\r");
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

}  // namespace

std::string cpu_model_of(const std::string& cpuinfo) {
  std::istringstream in(cpuinfo);
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon != std::string::npos && trimmed(line.substr(0, colon)) == "model name")
      return trimmed(line.substr(colon + 1));
  }
  return "";
}

double mem_total_bytes_of(const std::string& meminfo) {
  std::istringstream in(meminfo);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    double kib = 0;
    fields >> kib;  // "MemTotal:  131891204 kB": kibibytes
    return kib * 1024.0;
  }
  return 0.0;
}

DeviceFacts device_facts(int ranks_in_node) {
  DeviceFacts f;
  f.cpu_model = cpu_model_of(read_text("/proc/cpuinfo"));
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, kx::MemSpace>::accessible;
  if (host) {
    f.name = f.cpu_model.empty() ? std::string("CPU") : f.cpu_model;
    f.memory_bytes = mem_total_bytes_of(read_text("/proc/meminfo")) / std::max(ranks_in_node, 1);
    f.compute_units = 1;
    return f;
  }
#if defined(KOKKOS_ENABLE_CUDA)
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
    f.name = prop.name;
    f.memory_bytes = static_cast<double>(prop.totalGlobalMem);
    f.compute_units = prop.multiProcessorCount;
    return f;
  }
  cudaGetLastError();  // clear it: the facts stay unknown
#endif
  f.name = std::string(kx::ExecSpace::name()) + " device";
  return f;
}

}  // namespace tptrain::driver
