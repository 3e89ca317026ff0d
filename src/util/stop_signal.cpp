#include "src/util/stop_signal.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

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

// The file status flags of stdout and stderr before the first stop signal, for those that are
// a pipe, FIFO, socket or terminal (a write to a regular file does not wait for a reader); -1
// for the others.
int output_flags[3] = {-1, -1, -1};

void restore_output_flags() {
  for (int fd : {STDOUT_FILENO, STDERR_FILENO})
    if (output_flags[fd] >= 0) fcntl(fd, F_SETFL, output_flags[fd]);
}

// From the stop signal on, output that cannot be written at once is dropped rather than waited
// for: the launcher may have stopped reading it. Open MPI's mpiexec that gets SIGTERM itself
// sleeps odls_base_sigkill_timeout seconds in the loop that drains the ranks' ptys, then sends
// them SIGTERM, sleeps again and sends SIGKILL; a rank blocked in a write to its full pty would
// never reach its checkpoint and the requeue marker, which carry what matters. The blocked write
// itself restarts (SA_RESTART) and now returns at once. fcntl is async-signal-safe.
void record_stop_signal(int signal) {
  received.store(signal, std::memory_order_relaxed);
  for (int fd : {STDOUT_FILENO, STDERR_FILENO})
    if (output_flags[fd] >= 0) fcntl(fd, F_SETFL, output_flags[fd] | O_NONBLOCK);
}

void remember_output_flags() {
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    struct stat st {};
    output_flags[fd] = fstat(fd, &st) == 0 && !S_ISREG(st.st_mode) ? fcntl(fd, F_GETFL) : -1;
  }
}

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
  if (first) remember_output_flags();  // after restore_stop_signals they are the originals again
  for (int i = 0; i < 2; ++i)
    if (sigaction(kSignals[i], &action, first ? &previous[i] : nullptr) != 0) return false;
  installed.store(true);
  sigset_t stop;
  sigemptyset(&stop);
  for (int s : kSignals) sigaddset(&stop, s);
  sigprocmask(SIG_UNBLOCK, &stop, nullptr);
  return true;
}

void restore_output_flags_at_exit() {
  static const bool registered = std::atexit(restore_output_flags) == 0;
  (void)registered;
}

int restore_stop_signals() noexcept {
  if (installed.exchange(false))
    for (int i = 0; i < 2; ++i) sigaction(kSignals[i], &previous[i], nullptr);
  restore_output_flags();
  return received.exchange(0);
}

int stop_signal_received() { return received.load(std::memory_order_relaxed); }

std::string signal_name(int signal) {
  if (signal == SIGUSR1) return "SIGUSR1";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

}  // namespace tptrain::util
