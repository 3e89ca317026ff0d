// A fresh folder under the system temp directory for one test, removed with its contents at
// scope exit.
#pragma once

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace tptrain::test {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    namespace fs = std::filesystem;
    std::random_device rd;
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    for (int attempt = 0;; ++attempt) {
      path_ = fs::temp_directory_path() /
              (prefix + "_" + std::to_string(now) + "_" + std::to_string(rd()) + "_" + std::to_string(attempt));
      if (fs::create_directory(path_)) break;
    }
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace tptrain::test
