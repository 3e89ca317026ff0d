// MPI helpers shared by the tests: the world's rank and size, and a temporary directory that
// every rank of the world sees (named by rank 0, removed when the test ends).
#pragma once

#include <filesystem>
#include <mpi.h>
#include <string>
#include <unistd.h>

namespace tptrain::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Collective over the world: constructed and destroyed by every rank in the same order.
class SharedTempDir {
 public:
  explicit SharedTempDir(const std::string& prefix = "tptrain_test") {
    static int counter = 0;
    std::string name;
    if (world_rank() == 0) {
      name = (std::filesystem::temp_directory_path() /
              (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(++counter)))
                 .string();
      std::filesystem::remove_all(name);
      std::filesystem::create_directories(name);
    }
    int length = static_cast<int>(name.size());
    MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
    name.resize(static_cast<std::size_t>(length));
    MPI_Bcast(name.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = name;
  }
  ~SharedTempDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }

 private:
  std::string path_;
};

}  // namespace tptrain::test
