#include "io/checkpoint_publish.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace tptrain::io::detail {
namespace {

std::string errno_text(int e) {
  if (e == EACCES || e == EPERM) return "permission denied";
  return std::strerror(e);
}

// Failures of fsync that mean "not supported here", not "the data is not safe".
bool fsync_unsupported(int e) { return e == EINVAL || e == EROFS || e == ENOTSUP; }

// Allocation that the file system cannot do natively is not emulated (that would write the
// whole file twice).
bool fallocate_unsupported(int e) { return e == EOPNOTSUPP || e == ENOSYS || e == EINVAL; }

int allocate(int fd, std::uint64_t offset, std::uint64_t bytes) {
#if defined(__linux__)
  // Mode 0, growing the file: the file size limit (RLIMIT_FSIZE) only applies then.
  return ::fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(bytes)) == 0
             ? 0
             : errno;
#else
  (void)fd;
  (void)offset;
  (void)bytes;
  return EOPNOTSUPP;
#endif
}

}  // namespace

std::string probe_create(const std::string& tmp) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int e = errno;
    if (e == EACCES || e == EPERM) return "permission denied: " + tmp;
    return "cannot create " + tmp + ": " + std::strerror(e);
  }
  ::close(fd);
  return {};
}

std::string reserve_space(const std::string& tmp, std::uint64_t bytes) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return "cannot open " + tmp + ": " + errno_text(errno);
  const int e = allocate(fd, 0, bytes);
  if (e != 0 && !fallocate_unsupported(e)) {
    // Give back the blocks of a partial reservation, so that HDF5 can still close the file.
    [[maybe_unused]] const int rc = ::ftruncate(fd, 0);
    ::close(fd);
    return "cannot reserve " + std::to_string(bytes) + " bytes for " + tmp + ": " +
           errno_text(e);
  }
  ::close(fd);
  return {};
}

std::string write_failure_reason(const std::string& tmp) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno_text(errno);
  struct stat s {};
  std::string reason;
  if (::fstat(fd, &s) == 0) {
    constexpr std::uint64_t kProbe = 1 << 20;
    int e = allocate(fd, static_cast<std::uint64_t>(s.st_size), kProbe);
    if (fallocate_unsupported(e)) {
      // Without fallocate: write one byte past the end, then cut it off again.
      const char zero = 0;
      e = ::pwrite(fd, &zero, 1, s.st_size + static_cast<off_t>(kProbe)) == 1 ? 0 : errno;
    }
    if (e != 0) reason = errno_text(e);
    if (::ftruncate(fd, s.st_size) != 0 && reason.empty()) reason = errno_text(errno);
  }
  ::close(fd);
  return reason;
}

std::string publish(const std::string& tmp, const std::string& path) {
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "cannot open " + tmp + ": " + errno_text(errno);
  if (::fsync(fd) != 0 && !fsync_unsupported(errno)) {
    const int e = errno;
    ::close(fd);
    return "fsync of " + tmp + " failed: " + errno_text(e);
  }
  if (::close(fd) != 0) return "closing " + tmp + " failed: " + errno_text(errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return "cannot rename " + tmp + " to " + path + ": " + errno_text(errno);
  // The rename itself is durable once the directory is; failing that is not an error here (some
  // file systems cannot fsync a directory), the file is complete either way.
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    [[maybe_unused]] const int rc = ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

void remove_quietly(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
}

}  // namespace tptrain::io::detail
