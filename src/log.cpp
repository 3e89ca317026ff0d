#include "src/log.hpp"

#include <cstdio>

namespace tptrain::log {

namespace {
int g_rank = -1;
}

void set_rank(int world_rank) { g_rank = world_rank; }
int rank() { return g_rank; }

void info(const std::string& line) {
  if (g_rank > 0) return;
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

static void to_stderr(const char* kind, const std::string& message) {
  if (g_rank >= 0)
    std::fprintf(stderr, "tptrain: %s (rank %d): %s\n", kind, g_rank, message.c_str());
  else
    std::fprintf(stderr, "tptrain: %s: %s\n", kind, message.c_str());
  std::fflush(stderr);
}

void error(const std::string& message) { to_stderr("error", message); }
void warning(const std::string& message) {
  if (g_rank <= 0) to_stderr("warning", message);
}

}  // namespace tptrain::log
