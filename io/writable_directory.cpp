#include "io/writable_directory.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "io/path_text.hpp"

namespace tptrain::io {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int e) { return std::strerror(e); }

// Problems stat/access would only report as a generic error: say which component is wrong.
std::string component_problem(const fs::path& p) {
  if (p.native().size() >= PATH_MAX) return "File name too long (" + std::to_string(p.native().size()) + " characters)";
  for (const auto& part : p)
    if (part.native().size() > NAME_MAX)
      return "File name too long (a component has " + std::to_string(part.native().size()) +
             " characters, at most " + std::to_string(NAME_MAX) + ")";
  return {};
}

}  // namespace

std::string directory_problem(const std::string& path) {
  if (path.find('\0') != std::string::npos) return "the path contains a NUL character";
  if (path.empty()) return "the path is empty";
  const fs::path p = fs::absolute(fs::path(path)).lexically_normal();
  if (std::string c = component_problem(p); !c.empty()) return c;
  // The nearest existing ancestor decides: it must be a directory we may write into and search.
  fs::path existing = p;
  struct stat st {};
  while (::stat(existing.c_str(), &st) != 0) {
    // ENOTDIR: some ancestor is a file; walking up finds it and names it below.
    if (errno != ENOENT && errno != ENOTDIR) return errno_text(errno) + " (" + display_path(existing.string()) + ")";
    if (!existing.has_relative_path()) break;
    existing = existing.parent_path();
  }
  if (!S_ISDIR(st.st_mode))
    return existing == p ? "exists and is not a directory"
                         : display_path(existing.string()) + " is not a directory";
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    return errno_text(errno) + (existing == p ? std::string() : " (" + display_path(existing.string()) + ")");
  return {};
}

void prepare_writable_directory(const std::string& path, const std::string& key) {
  const auto fail = [&](const std::string& why) {
    throw std::runtime_error(key + " = " + display_path(path) + ": cannot write there: " + why);
  };
  if (std::string problem = directory_problem(path); !problem.empty()) fail(problem);
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) fail("cannot create it: " + ec.message());
  // access() trusts permission bits; a read-only mount, a full quota or an ACL shows only when
  // writing, so write.
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);  // ranks on other nodes probe the same shared directory
  const std::string probe =
      (fs::path(path) / (".tptrain-probe-" + std::string(host) + "-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot create a file in it: " + errno_text(errno));
  const char byte = 0;
  const bool wrote = ::write(fd, &byte, 1) == 1;
  const int write_errno = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!wrote) fail("cannot write a file in it: " + errno_text(write_errno));
}

}  // namespace tptrain::io
