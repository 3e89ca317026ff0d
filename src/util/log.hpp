// Console output of a run: rank 0 speaks for the job; errors name the rank that saw them.
#pragma once

#include <fmt/format.h>
#include <string>

namespace tptrain::log {

// Set once after MPI is up; -1 = no MPI (tptrain check, inspect).
void set_rank(int world_rank);
int rank();

// Printed by rank 0 (or the only process) on stdout.
void info(const std::string& line);
// `text` as it is (no newline added), by rank 0, flushed at once: output that arrives piece
// by piece, like generated tokens.
void stream(const std::string& text);
// Printed by the calling rank on stderr, prefixed "tptrain: error:" (and the rank under MPI).
void error(const std::string& message);
void warning(const std::string& message);

template <class... Args>
void infof(fmt::format_string<Args...> f, Args&&... args) {
  info(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tptrain::log
