#include "io/checkpoint_test_hooks.hpp"

#include <csignal>
#include <cstdio>

#include "base/test_hooks.hpp"

namespace tptrain::io::detail {

void kill_if_testing_crash_at_step(std::int64_t step) {
  if (test_hooks().kill_in_checkpoint != step) return;
  std::fprintf(stderr, "tptrain: test hook kill_in_checkpoint=%lld: killing the job mid-write\n",
               static_cast<long long>(step));
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace tptrain::io::detail
