#include "io/checkpoint_test_hooks.hpp"

#include <csignal>
#include <cstdio>

#include <mpi.h>

#include "base/test_hooks.hpp"

namespace tptrain::io::detail {

void kill_if_testing_crash_at_step(std::int64_t step, const char* point) {
  if (test_hooks().kill_in_checkpoint != step || test_hooks().kill_in_checkpoint_at != point) return;
  std::fprintf(stderr, "tptrain: test hook kill_in_checkpoint=%lld@%s: killing the job mid-write\n",
               static_cast<long long>(step), point);
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace tptrain::io::detail

namespace tptrain::io::detail {

std::string failure_if_testing(std::int64_t step) {
  if (test_hooks().fail_in_checkpoint != step) return {};
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank == 0 ? "test hook fail_in_checkpoint: the data could not be written (a forced failure)" : std::string();
}

}  // namespace tptrain::io::detail
