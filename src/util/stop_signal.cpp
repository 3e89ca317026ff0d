#include "src/util/stop_signal.hpp"

#include <signal.h>

#include <atomic>
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
std::atomic<bool> installed{false};

void record_stop_signal(int signal) { received.store(signal, std::memory_order_relaxed); }

}  // namespace

bool record_stop_signals() noexcept {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a read or write interrupted by the signal resumes instead of failing with EINTR
  // (HDF5, MPI and the data reader do not all retry). No SA_RESETHAND: a second signal (Slurm
  // sends SIGTERM to every task of a job whose batch script already forwarded SIGUSR1) must not
  // kill the rank while it writes the checkpoint.
  action.sa_flags = SA_RESTART;
  const bool first = !installed.load();
  for (int i = 0; i < 2; ++i)
    if (sigaction(kSignals[i], &action, first ? &previous[i] : nullptr) != 0) return false;
  installed.store(true);
  sigset_t stop;
  sigemptyset(&stop);
  for (int s : kSignals) sigaddset(&stop, s);
  sigprocmask(SIG_UNBLOCK, &stop, nullptr);
  return true;
}

int restore_stop_signals() noexcept {
  if (installed.exchange(false))
    for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &previous[i], nullptr);
  return received.exchange(0);
}

int stop_signal_received() { return received.load(std::memory_order_relaxed); }

std::string signal_name(int signal) {
  if (signal == SIGUSR1) return "SIGUSR1";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

}  // namespace tptrain::util
