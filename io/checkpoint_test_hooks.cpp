#include "io/checkpoint_test_hooks.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace tptrain::io::detail {

void kill_if_testing_crash_at_step(std::int64_t step) {
  const char* at = std::getenv("TPTRAIN_TEST_KILL_IN_CHECKPOINT");
  if (at == nullptr || std::strtoll(at, nullptr, 10) != step) return;
  std::fprintf(stderr, "tptrain: TPTRAIN_TEST_KILL_IN_CHECKPOINT=%s: killing the job mid-write\n",
               at);
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace tptrain::io::detail
