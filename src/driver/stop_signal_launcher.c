// build/tptrain: runs the program, build/tptrain-bin next to it, with SIGUSR1 and SIGTERM blocked.
//
// A stop signal must stop `tptrain train` cleanly from the moment a job starts (docs/design.md,
// "Stopping and requeueing"). But the program links some fifty shared libraries (MPI, HDF5,
// Kokkos, OpenBLAS and theirs), and the dynamic loader maps and relocates them for about 10 ms of
// CPU time, several times that on a busy node, before any code of the program runs: a signal
// then still has its default action and ends the rank. This launcher needs nothing but libc and
// starts within a millisecond. It blocks the two signals and replaces itself with the program
// (same pid, arguments and environment); the blocked mask, and a signal that arrives in the
// meantime, survive the exec. The program installs its handlers before any library is
// initialised and then unblocks them, and a pending signal is recorded at that moment
// (src/util/stop_signal.hpp, src/driver/main.cpp).
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char kProgram[] = "tptrain-bin";

int main(int argc, char** argv) {
  (void)argc;
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGUSR1);
  sigaddset(&stop, SIGTERM);
  sigprocmask(SIG_BLOCK, &stop, NULL);

  // Test hook (tests/signal_requeue.sh): the signal arrives at the first instruction.
  const char* at_start = getenv("TPTRAIN_TEST_STOP_SIGNAL_AT_START");
  if (at_start != NULL && strcmp(at_start, "SIGUSR1") == 0) raise(SIGUSR1);
  if (at_start != NULL && strcmp(at_start, "SIGTERM") == 0) raise(SIGTERM);

  // The program sits next to this file, wherever the build tree was moved.
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - sizeof(kProgram));
  char* slash = n > 0 ? memrchr(path, '/', (size_t)n) : NULL;
  if (slash == NULL) {
    fprintf(stderr, "tptrain: error: cannot find the directory of this executable (/proc/self/exe: %s)\n",
            n < 0 ? strerror(errno) : "no directory");
    return 1;
  }
  memcpy(slash + 1, kProgram, sizeof(kProgram));
  execv(path, argv);
  fprintf(stderr, "tptrain: error: cannot run %s: %s (it is built next to tptrain)\n", path, strerror(errno));
  return 1;
}
