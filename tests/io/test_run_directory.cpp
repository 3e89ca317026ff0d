// Output directories: writable before step 1, and owned by one run at a time.
#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "io/run_lock.hpp"
#include "io/writable_directory.hpp"

namespace fs = std::filesystem;
using tptrain::io::directory_problem;
using tptrain::io::prepare_writable_directory;
using tptrain::io::RunLock;
using tptrain::test::contains;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("tptrain_rundir_" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<std::string> g_warnings;
void remember(const std::string& w) { g_warnings.push_back(w); }

}  // namespace

TEST_CASE("directories that cannot be written are refused with the reason", "[io][rundir]") {
  TempDir t;
  const std::string file = (t.path / "file").string();
  std::ofstream(file) << "x";
  CHECK(directory_problem((t.path / "new" / "deeper").string()).empty());  // creatable
  CHECK(directory_problem(t.path.string()).empty());
  CHECK_THAT(directory_problem(file), contains("not a directory"));
  CHECK_THAT(directory_problem(file + "/ck"), contains("is not a directory"));
  CHECK_THAT(directory_problem("/dev/null/x"), contains("is not a directory"));
  CHECK_THROWS_WITH(prepare_writable_directory("/proc/tptrain_ck", "checkpoint.dir"),
                    contains("checkpoint.dir = /proc/tptrain_ck: cannot write there"));
  CHECK_THAT(directory_problem((t.path / std::string(300, 'c')).string()), contains("File name too long"));
  CHECK_THAT(directory_problem(std::string("ab\0c", 4)), contains("NUL"));
  CHECK_THROWS_WITH(prepare_writable_directory(file + "/ck", "run.dir"),
                    contains("run.dir = " + file + "/ck: cannot write there") && contains("is not a directory"));
  prepare_writable_directory((t.path / "a" / "b").string(), "run.dir");
  CHECK(fs::is_directory(t.path / "a" / "b"));
  CHECK(fs::is_empty(t.path / "a" / "b"));  // the probe is gone
}

TEST_CASE("a run directory is locked by one run; a stale lock is taken over", "[io][rundir]") {
  TempDir t;
  const std::string dir = (t.path / "run").string();
  const std::string lock_file = (fs::path(dir) / RunLock::kFileName).string();
  g_warnings.clear();
  {
    RunLock first({dir, dir + "/."}, remember);  // the same directory twice: locked once
    REQUIRE(fs::exists(lock_file));
    // A second run (another open file description, as in another process) is refused, naming
    // the owner.
    CHECK_THROWS_WITH(RunLock({dir}, remember),
                      contains("is in use by tptrain pid " + std::to_string(::getpid())) && contains("on host"));
  }
  CHECK_FALSE(fs::exists(lock_file));  // removed at the end of the run
  // A lock file whose owner died (the kernel dropped its flock): reported, then taken over.
  fs::create_directories(dir);
  std::ofstream(lock_file) << "host elsewhere pid 4242 since 2026-01-01T00:00:00Z\n";
  {
    RunLock again({dir}, remember);
    REQUIRE(g_warnings.size() == 1);
    CHECK_THAT(g_warnings[0], contains("stale lock") && contains("tptrain pid 4242 on host elsewhere"));
  }
  // A live owner in another process: flock held on the file by someone else.
  fs::create_directories(dir);
  std::ofstream(lock_file) << "host n01 pid 77 since 2026-01-01T00:00:00Z\n";
  const int fd = ::open(lock_file.c_str(), O_RDWR);
  REQUIRE(::flock(fd, LOCK_EX) == 0);
  CHECK_THROWS_WITH(RunLock({dir}, remember), contains("in use by tptrain pid 77 on host n01"));
  ::close(fd);
}
