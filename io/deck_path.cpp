#include "io/deck_path.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace tptrain::io {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

}  // namespace

std::string errno_problem(int err) {
  switch (err) {
    case ENOENT:
      return "does not exist";
    case ENOTDIR:
      return "cannot be accessed: a component of the path is not a directory (ENOTDIR)";
    case ENAMETOOLONG:
      return "cannot be accessed: the file name is too long (ENAMETOOLONG)";
    case EACCES:
      return "cannot be accessed: permission denied (EACCES)";
    case ELOOP:
      return "cannot be accessed: too many levels of symbolic links (ELOOP)";
    default:
      return fmt::format("cannot be accessed: {} (errno {})", std::strerror(err), err);
  }
}

std::string regular_file_problem(const std::string& path, std::uint64_t* size) {
  if (path.find('\0') != std::string::npos) return "contains a NUL character";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno_problem(errno);
  if (S_ISDIR(st.st_mode)) return "is a directory, not a regular file";
  if (!S_ISREG(st.st_mode)) return fmt::format("is not a regular file ({})", kind_of(st.st_mode));
  // Regular, so opening cannot block; O_NONBLOCK covers a swap for a FIFO since the stat.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return err == EACCES ? "cannot be opened for reading: permission denied (EACCES)"
                         : errno_problem(err);
  }
  ::close(fd);
  if (size) *size = static_cast<std::uint64_t>(st.st_size);
  return {};
}

std::string read_regular_file(const std::string& path, std::uint64_t max_bytes, std::string& text) {
  text.clear();
  std::uint64_t size = 0;
  if (std::string problem = regular_file_problem(path, &size); !problem.empty()) return problem;
  if (size > max_bytes)
    return fmt::format("is {} bytes, more than the limit of {} bytes", size, max_bytes);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno_problem(errno);
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    problem = "is not a regular file";  // replaced since it was examined
  } else {
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        problem = fmt::format("cannot be read: {}", std::strerror(errno));
        break;
      }
      if (n == 0) break;
      text.append(buffer, static_cast<std::size_t>(n));
      if (text.size() > max_bytes) {
        problem = fmt::format("is more than the limit of {} bytes", max_bytes);
        break;
      }
    }
  }
  ::close(fd);
  if (!problem.empty()) text.clear();
  return problem;
}

}  // namespace tptrain::io
