#include "io/read_watchdog.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace tptrain::io {

namespace {

// Preformatted for the signal handler, which may only call async-signal-safe functions. One
// guarded read at a time (the outermost watchdog guards; nested ones leave it in place).
char g_crash_message[4096];
std::size_t g_crash_length = 0;
int g_guards = 0;

extern "C" void crashed_in_hdf5(int signal) {
  char digits[4] = {static_cast<char>('0' + signal / 10 % 10), static_cast<char>('0' + signal % 10), ')', ':'};
  [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, g_crash_message, g_crash_length);
  w = ::write(STDERR_FILENO, digits, sizeof digits);
  static const char tail[] = " the file's metadata is corrupt\n";
  w = ::write(STDERR_FILENO, tail, sizeof tail - 1);
  ::_exit(1);
}

}  // namespace

namespace {
// Atomic: a watchdog may be made on another thread than the one that read the deck.
std::atomic<double> g_configured_seconds{ReadWatchdog::kDefaultSeconds};
}  // namespace

double ReadWatchdog::configured_seconds() { return g_configured_seconds.load(); }

void ReadWatchdog::set_configured_seconds(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds))
    throw std::invalid_argument("tptrain: ReadWatchdog: checkpoint.metadata_timeout_s = " + std::to_string(seconds) +
                                ": expected a positive number of seconds");
  g_configured_seconds.store(seconds);
}

ReadWatchdog::ReadWatchdog(const std::string& path, double seconds)
    : path_(path), seconds_(seconds > 0 ? seconds : configured_seconds()) {
  deadline_ = std::chrono::steady_clock::now() +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double>(seconds_));
  thread_ = std::thread([this] { watch(); });
  if (g_guards++ == 0) {
    const int n = std::snprintf(g_crash_message, sizeof g_crash_message,
                                "tptrain: error: reading %s crashed inside libhdf5 (signal ", path_.c_str());
    g_crash_length = n < 0 ? 0 : std::min(static_cast<std::size_t>(n), sizeof g_crash_message - 1);
    struct sigaction action {};
    action.sa_handler = crashed_in_hdf5;
    sigemptyset(&action.sa_mask);
    guarding_ = ::sigaction(SIGSEGV, &action, &previous_segv_) == 0 &&
                ::sigaction(SIGBUS, &action, &previous_bus_) == 0;
  }
}

ReadWatchdog::~ReadWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (--g_guards == 0 && guarding_) {
    ::sigaction(SIGSEGV, &previous_segv_, nullptr);
    ::sigaction(SIGBUS, &previous_bus_, nullptr);
  }
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
