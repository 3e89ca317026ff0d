// The clean stop on SIGUSR1/SIGTERM: the handlers record the signal (and nothing else), restore
// the previous actions and hand the record back when they go, and the ranks agree on one answer
// whichever of them was signalled (the training loop's check after every step).
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "base/agreement.hpp"
#include "catch.hpp"
#include "src/util/stop_signal.hpp"

using tptrain::util::record_stop_signals;
using tptrain::util::restore_stop_signals;
using tptrain::util::stop_signal_received;

namespace {

// A signal sent to the process (not raise(), which interrupts the calling thread at once) may
// be handled by any thread, a little later: wait for its record, at most 10 s.
int await_stop_signal() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stop_signal_received() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return stop_signal_received();
}

void (*handler_of(int signal))(int) {
  struct sigaction current {};
  sigaction(signal, nullptr, &current);
  return current.sa_handler;
}

// Records the stop signals for the life of a test, then restores the previous actions.
struct Recording {
  Recording() { REQUIRE(record_stop_signals()); }
  ~Recording() { restore_stop_signals(); }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;
};

}  // namespace

TEST_CASE("SIGUSR1 and SIGTERM are recorded until restore_stop_signals, which hands the record back",
          "[stop_signal]") {
  const auto usr1_before = handler_of(SIGUSR1), term_before = handler_of(SIGTERM);
  REQUIRE(record_stop_signals());
  CHECK(stop_signal_received() == 0);
  CHECK(handler_of(SIGUSR1) != usr1_before);
  CHECK(record_stop_signals());  // again: harmless, and the actions to restore stay the first ones
  REQUIRE(raise(SIGUSR1) == 0);  // would end the test binary without the handler
  CHECK(stop_signal_received() == SIGUSR1);
  REQUIRE(raise(SIGTERM) == 0);
  CHECK(stop_signal_received() == SIGTERM);  // the last one
  CHECK(restore_stop_signals() == SIGTERM);
  CHECK(stop_signal_received() == 0);
  CHECK(handler_of(SIGUSR1) == usr1_before);
  CHECK(handler_of(SIGTERM) == term_before);
  {
    const Recording again;
    CHECK(stop_signal_received() == 0);
    REQUIRE(kill(getpid(), SIGUSR1) == 0);
    CHECK(await_stop_signal() == SIGUSR1);
  }
  CHECK(stop_signal_received() == 0);
}

TEST_CASE("a stop signal that was blocked and pending is recorded when the handlers come", "[stop_signal]") {
  // As the launcher leaves it (src/driver/stop_signal_launcher.c): blocked, and sent meanwhile.
  sigset_t stop, before;
  sigemptyset(&stop);
  sigaddset(&stop, SIGUSR1);
  sigaddset(&stop, SIGTERM);
  REQUIRE(pthread_sigmask(SIG_BLOCK, &stop, &before) == 0);
  REQUIRE(raise(SIGTERM) == 0);  // pending: the default action would end the test binary later
  {
    const Recording recording;
    CHECK(stop_signal_received() == SIGTERM);
    sigset_t now;
    REQUIRE(pthread_sigmask(SIG_BLOCK, nullptr, &now) == 0);
    CHECK(sigismember(&now, SIGTERM) == 0);
    CHECK(sigismember(&now, SIGUSR1) == 0);
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

TEST_CASE("stop signals are named in the stop message", "[stop_signal]") {
  CHECK(tptrain::util::signal_name(SIGUSR1) == "SIGUSR1");
  CHECK(tptrain::util::signal_name(SIGTERM) == "SIGTERM");
  CHECK(tptrain::util::signal_name(SIGHUP) == "signal " + std::to_string(SIGHUP));
  CHECK(tptrain::util::kRequeueExitStatus == 3);  // the contract of the jobs/slurm scripts
}

TEST_CASE("every rank stops when any rank was signalled", "[stop_signal][mpi]") {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  using tptrain::parallel::agree_on_stop_signal;
  CHECK(agree_on_stop_signal(MPI_COMM_WORLD, 0) == 0);
  // Only the last rank has seen the signal (it reached the ranks at different moments).
  CHECK(agree_on_stop_signal(MPI_COMM_WORLD, rank == size - 1 ? SIGUSR1 : 0) == SIGUSR1);
  // Different signals on different ranks: still one answer everywhere.
  CHECK(agree_on_stop_signal(MPI_COMM_WORLD, rank % 2 == 0 ? SIGTERM : SIGUSR1) == std::max(SIGTERM, SIGUSR1));

  // A real signal sent to the last rank's process only (CHECK, not REQUIRE: every rank must
  // reach the collective below).
  const Recording recording;
  if (rank == size - 1) {
    CHECK(kill(getpid(), SIGUSR1) == 0);
    CHECK(await_stop_signal() == SIGUSR1);
  }
  CHECK(agree_on_stop_signal(MPI_COMM_WORLD, stop_signal_received()) == SIGUSR1);
}
