#include "src/util/blas_info.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

namespace tptrain::util {

namespace {

// OpenBLAS's own query functions, looked up at run time: libblas.so.3 may be another BLAS.
template <class F>
F symbol(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

std::string cpu_vector_extension() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    std::string w;
    bool avx512 = false, avx2 = false, avx = false;
    while (words >> w) {
      avx512 |= w == "avx512f";
      avx2 |= w == "avx2";
      avx |= w == "avx";
    }
    return avx512 ? "avx512f" : avx2 ? "avx2" : avx ? "avx" : "sse";
  }
  return "";
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// OpenBLAS kernel families that use the CPU's widest single-precision FMA units.
bool core_fits(const std::string& core, const std::string& cpu) {
  const std::string c = lower(core);
  const auto any = [&](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* n) { return c == n; });
  };
  if (cpu == "avx512f") return any({"skylakex", "cooperlake", "sapphirerapids"});
  if (cpu == "avx2")
    return any({"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "zen2", "zen3"});
  return true;
}

}  // namespace

BlasInfo blas_info() {
  BlasInfo info;
  info.cpu = cpu_vector_extension();
  using text_fn = char* (*)();
  using int_fn = int (*)();
  const auto config = symbol<text_fn>("openblas_get_config");
  const auto corename = symbol<text_fn>("openblas_get_corename");
  const auto threads = symbol<int_fn>("openblas_get_num_threads");
  if (config == nullptr) {
    info.library = "unknown BLAS (not OpenBLAS: check `update-alternatives --display libblas.so.3`; the "
                   "reference BLAS is 10x slower than an optimised one)";
    return info;
  }
  info.library = config();
  if (info.library.rfind("OpenBLAS", 0) != 0) info.library = "OpenBLAS " + info.library;
  if (corename != nullptr) info.core = corename();
  if (threads != nullptr) info.threads = threads();
  info.warning = blas_kernel_warning(info.core, info.cpu);
  return info;
}

std::string blas_kernel_warning(const std::string& core, const std::string& cpu) {
  if (core.empty() || cpu.empty() || core_fits(core, cpu)) return "";
  const char* suggest = cpu == "avx512f" ? "SkylakeX" : "Haswell";
  return "OpenBLAS runs its " + core + " kernels on a CPU with " + cpu +
         ": GEMMs at half speed or worse; set OPENBLAS_CORETYPE=" + suggest + " (jobs/env.sh does)";
}

}  // namespace tptrain::util
