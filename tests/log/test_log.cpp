// Console output keeps every byte: generated text and paths may hold NUL bytes.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "catch.hpp"
#include "src/util/log.hpp"
#include "tests/mpi_test_util.hpp"

namespace {

// Runs f with stdout (fd 1) redirected to a file; returns what it wrote.
template <class F>
std::string captured_stdout(F&& f) {
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("tptrain_log_" + std::to_string(::getpid()) + ".txt")).string();
  std::fflush(stdout);
  const int saved = ::dup(1);
  std::FILE* out = std::fopen(file.c_str(), "w");
  ::dup2(::fileno(out), 1);
  f();
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  std::fclose(out);
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(file);
  return text.str();
}

}  // namespace

TEST_CASE("info and stream write text with NUL bytes in full", "[log]") {
  const int rank = tptrain::log::rank();
  tptrain::log::set_rank(-1);
  const std::string text("ab\0cd", 5);
  CHECK(captured_stdout([&] { tptrain::log::info(text); }) == text + "\n");
  CHECK(captured_stdout([&] {
          tptrain::log::stream(text);
          tptrain::log::stream(std::string(1, '\0'));
        }) == text + std::string(1, '\0'));
  tptrain::log::set_rank(rank);
}
