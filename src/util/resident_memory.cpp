#include "src/util/resident_memory.hpp"

#include <sys/resource.h>

#include <fstream>
#include <sstream>
#include <string>

namespace tptrain::util {

ResidentMemory resident_memory() {
  ResidentMemory m;
  // /proc/self/status: "VmRSS:     12345 kB" and "VmHWM: ..." (Linux).
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    const bool rss = line.rfind("VmRSS:", 0) == 0, hwm = line.rfind("VmHWM:", 0) == 0;
    if (!rss && !hwm) continue;
    std::istringstream fields(line.substr(6));
    std::size_t kib = 0;
    if (!(fields >> kib)) continue;
    (rss ? m.current : m.peak) = kib * 1024;
  }
  if (m.peak == 0) {
    rusage usage{};
    if (getrusage(RUSAGE_SELF, &usage) == 0) {
#if defined(__APPLE__)
      m.peak = static_cast<std::size_t>(usage.ru_maxrss);  // bytes on macOS
#else
      m.peak = static_cast<std::size_t>(usage.ru_maxrss) * 1024;  // KiB elsewhere
#endif
    }
  }
  return m;
}

}  // namespace tptrain::util
