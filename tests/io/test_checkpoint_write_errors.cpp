// Writing a checkpoint where the file system refuses: out of space (a file size limit, which
// makes writes fail with EFBIG like a full disk fails with ENOSPC, without root or a small
// file system) and no permission. Every rank must get one clear CheckpointError naming the
// reason, no .tmp may stay, and the process must go on (write again) and finalize cleanly:
// tests/cli_checkpoint_file_tests.cmake runs this in its own process and checks its exit status.
#include <mpi.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "catch.hpp"
#include "io/checkpoint_file.hpp"
#include "tests/mpi_test_util.hpp"

using namespace tptrain::io;
namespace fs = std::filesystem;

namespace {

struct Sample {
  std::vector<float> values;
  std::vector<TensorShard> shards;
};

// A [rows, 256] tensor, rows split over the ranks.
Sample sample(std::uint64_t rows) {
  const auto r = static_cast<std::uint64_t>(tptrain::test::world_rank());
  const auto n = static_cast<std::uint64_t>(tptrain::test::world_size());
  const std::uint64_t lo = rows * r / n, hi = rows * (r + 1) / n;
  Sample s;
  s.values.assign((hi - lo) * 256, 0.5f);
  TensorShard t;
  t.name = "model/big";
  t.global_shape = {rows, 256};
  t.slabs = {Hyperslab{{lo, 0}, {hi - lo, 256}}};
  t.data = s.values.data();
  s.shards.push_back(t);
  return s;
}

CheckpointMeta meta() {
  CheckpointMeta m;
  m.step = 2;
  m.deck = "[model]\n";
  m.train = {{"step", 2}};
  return m;
}

std::string error_of(const std::string& path, std::uint64_t rows) {
  Sample s = sample(rows);
  try {
    write_checkpoint(MPI_COMM_WORLD, path, meta(), s.shards);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return {};
}

// Every rank has the same message.
bool same_everywhere(const std::string& msg) {
  unsigned long long h = 1469598103934665603ull;
  for (unsigned char c : msg) h = (h ^ c) * 1099511628211ull;
  unsigned long long mine[2] = {h, ~h}, max[2] = {0, 0};
  MPI_Allreduce(mine, max, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return max[0] == ~max[1];
}

}  // namespace

TEST_CASE("a checkpoint write that runs out of space fails cleanly",
          "[io][checkpoint][diskfull][mpi]") {
  tptrain::test::SharedTempDir dir("tptrain_diskfull");
  const std::string path = dir.file("step_00000002.h5");
  // 1 MiB of data against a 256 KiB file size limit on every rank.
  struct rlimit old {};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(sigaction(SIGXFSZ, &ignore, &previous) == 0);
  struct rlimit small = old;
  small.rlim_cur = 256 * 1024;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  const std::string msg = error_of(path, 1024);
  REQUIRE(setrlimit(RLIMIT_FSIZE, &old) == 0);
  sigaction(SIGXFSZ, &previous, nullptr);

  INFO(msg);
  CHECK(same_everywhere(msg));
  CHECK(msg.find("writing checkpoint " + path + ": ") == 0);
  CHECK(msg.find("File too large") != std::string::npos);
  CHECK(msg.find(path + ".tmp") != std::string::npos);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(!fs::exists(path));
  CHECK(!fs::exists(path + ".tmp"));

  // The library is still usable: the same write succeeds without the limit.
  CHECK(error_of(path, 1024).empty());
  CHECK(fs::exists(path));
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("a checkpoint write without permission names the path",
          "[io][checkpoint][diskfull][mpi]") {
  // /sys refuses new files even to root (CI runs as root, where chmod 0555 would not stop us).
  const std::string path = "/sys/tptrain_step_00000002.h5";
  if (!fs::is_directory("/sys")) {
    WARN("no /sys here: the permission test is skipped");
    return;
  }
  const std::string msg = error_of(path, 16);
  INFO(msg);
  CHECK(same_everywhere(msg));
  CHECK(msg == "writing checkpoint " + path + ": permission denied: " + path + ".tmp");
}
