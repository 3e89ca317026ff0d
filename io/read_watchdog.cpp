#include "io/read_watchdog.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace tptrain::io {

double ReadWatchdog::configured_seconds() {
  if (const char* env = std::getenv("TPTRAIN_METADATA_TIMEOUT_S")) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end != env && v > 0) return v;
  }
  return kDefaultSeconds;
}

ReadWatchdog::ReadWatchdog(const std::string& path, double seconds)
    : path_(path), seconds_(seconds > 0 ? seconds : configured_seconds()) {
  deadline_ = std::chrono::steady_clock::now() +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double>(seconds_));
  thread_ = std::thread([this] { watch(); });
}

ReadWatchdog::~ReadWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ReadWatchdog::kick() {
  std::lock_guard<std::mutex> lock(mutex_);
  deadline_ = std::chrono::steady_clock::now() +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double>(seconds_));
}

void ReadWatchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!done_) {
    if (wake_.wait_until(lock, deadline_) == std::cv_status::timeout && !done_ &&
        std::chrono::steady_clock::now() >= deadline_) {
      char text[4096];
      const int n = std::snprintf(text, sizeof text,
                                  "tptrain: reading %s did not finish in %g s: the file's metadata "
                                  "is corrupt (or its file system stopped answering)\n",
                                  path_.c_str(), seconds_);
      if (n > 0) {
        const auto len = static_cast<std::size_t>(n) < sizeof text ? static_cast<std::size_t>(n)
                                                                    : sizeof text - 1;
        [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, text, len);
      }
      ::_exit(1);
    }
  }
}

}  // namespace tptrain::io
