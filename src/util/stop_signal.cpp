#include "src/util/stop_signal.hpp"

#include <signal.h>

#include <atomic>
#include <stdexcept>
#include <string>

namespace tptrain::util {

namespace {

// A lock-free atomic rather than a volatile sig_atomic_t: the kernel delivers a process signal
// to any thread that does not block it (an OpenMP worker, an MPI progress or NCCL proxy thread),
// and sig_atomic_t only promises something to the thread that was interrupted.
std::atomic<int> received{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

constexpr int kSignals[] = {SIGUSR1, SIGTERM};
struct sigaction previous[2];
bool installed = false;

void record_stop_signal(int signal) { received.store(signal, std::memory_order_relaxed); }

}  // namespace

StopSignals::StopSignals() {
  if (installed) throw std::logic_error("StopSignals: the handlers are already installed");
  received.store(0);
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a read or write interrupted by the signal resumes instead of failing with EINTR
  // (HDF5, MPI and the data reader do not all retry). No SA_RESETHAND: a second signal (Slurm
  // sends SIGTERM to every task of a job whose batch script already forwarded SIGUSR1) must not
  // kill the rank while it writes the checkpoint.
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < 2; ++i)
    if (sigaction(kSignals[i], &action, &previous[i]) != 0)
      throw std::runtime_error("cannot install the handler of " + signal_name(kSignals[i]));
  installed = true;
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &previous[i], nullptr);
  installed = false;
}

int stop_signal_received() { return received.load(std::memory_order_relaxed); }

std::string signal_name(int signal) {
  if (signal == SIGUSR1) return "SIGUSR1";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

}  // namespace tptrain::util
