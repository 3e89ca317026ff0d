#include "io/requeue_marker.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "io/path_text.hpp"

namespace tptrain::io {

std::string requeue_marker_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / kRequeueMarkerName).string();
}

void remove_requeue_marker(const std::string& run_dir) {
  const std::string path = requeue_marker_path(run_dir);
  if (std::remove(path.c_str()) != 0 && errno != ENOENT)
    throw std::runtime_error("cannot remove the requeue marker " + display_path(path) + " of an earlier run: " +
                             std::strerror(errno));
}

std::string write_requeue_marker(const std::string& run_dir, const std::string& text) {
  const std::string path = requeue_marker_path(run_dir), tmp = path + ".tmp";
  const std::string line = text + '\n';
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return display_path(tmp) + ": " + std::strerror(errno);
  const ssize_t n = ::write(fd, line.data(), line.size());
  int error = n < 0 ? errno : (n != static_cast<ssize_t>(line.size()) ? ENOSPC : 0);  // a short write: full
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    std::remove(tmp.c_str());
    return display_path(tmp) + ": " + std::strerror(error);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    std::remove(tmp.c_str());
    return display_path(path) + ": " + std::strerror(rename_error);
  }
  return {};
}

}  // namespace tptrain::io
