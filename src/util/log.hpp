// Console output of a run: rank 0 speaks for the job; errors name the rank that saw them.
#pragma once

#include <fmt/format.h>
#include <string>

namespace tptrain::log {

// Set once after MPI is up; -1 = no MPI (tptrain check, inspect).
void set_rank(int world_rank);
int rank();

// Printed by rank 0 (or the only process) on stdout, or on stderr once stdout carries data.
void info(const std::string& line);
// For a command whose stdout is its result (generate's text): from now on info() lines go to
// stderr, so that `tptrain generate ... > out.txt` holds the text alone; stream() stays on stdout.
void keep_stdout_for_data();
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
