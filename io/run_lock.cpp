#include "io/run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include "io/path_text.hpp"

namespace tptrain::io {

namespace fs = std::filesystem;

namespace {

std::string this_host() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// "host pid start" of the owner, as written by write_owner; at most one short line is read,
// so a lock file replaced by something huge cannot stall us.
struct Owner {
  std::string host;
  long pid = 0;
  std::string since;
  bool known() const { return pid > 0 && !host.empty(); }
  std::string describe() const {
    return known() ? "tptrain pid " + std::to_string(pid) + " on host " + host + " since " + since
                   : "another tptrain run (owner unknown)";
  }
};

Owner read_owner(int fd) {
  char buf[512] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  Owner o;
  if (n <= 0) return o;
  char host[256] = {}, since[64] = {};
  long pid = 0;
  if (std::sscanf(buf, "host %255s pid %ld since %63s", host, &pid, since) == 3) {
    o.host = host;
    o.pid = pid;
    o.since = since;
  }
  return o;
}

void write_owner(int fd) {
  char since[32] = {};
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &tm);
  const std::string line = "host " + this_host() + " pid " + std::to_string(::getpid()) + " since " + since + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size()))
    throw std::runtime_error(std::string("cannot write the lock file: ") + std::strerror(errno));
}

bool alive_here(const Owner& o) { return ::kill(static_cast<pid_t>(o.pid), 0) == 0 || errno == EPERM; }

}  // namespace

RunLock::RunLock(const std::vector<std::string>& dirs, void (*warn)(const std::string&)) {
  try {
    for (const std::string& dir : dirs) {
      std::error_code ec;
      fs::create_directories(dir, ec);
      const std::string path = (fs::path(dir) / kFileName).string();
      bool duplicate = false;
      for (const Held& h : held_) duplicate |= fs::equivalent(h.path, path, ec);
      if (duplicate) continue;
      const auto refuse = [&](const std::string& why) {
        throw std::runtime_error(display_path(dir) + " is in use by " + why + " (lock file " + display_path(path) +
                                 "): two runs must not share a run or checkpoint directory; use another "
                                 "directory, or wait for that run to end");
      };
      for (int attempt = 0;; ++attempt) {
        const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
          throw std::runtime_error("cannot create the lock file " + display_path(path) + ": " + std::strerror(errno));
        const Owner before = read_owner(fd);
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
          const int e = errno;
          const bool no_flock = e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS;
          // Without flock, the owner's pid decides, which we can test on this host only.
          const bool owner_alive =
              !no_flock || (before.known() && (before.host != this_host() || alive_here(before)));
          if (owner_alive) ::close(fd);
          if (e == EWOULDBLOCK) refuse(before.describe());
          if (!no_flock) throw std::runtime_error("cannot lock " + display_path(path) + ": " + std::strerror(e));
          if (owner_alive) refuse(before.describe());
        }
        // The previous owner may have removed the file between our open and our flock: then we
        // hold a lock on an unlinked file; start over on the new one.
        struct stat mine {}, named {};
        if (::fstat(fd, &mine) != 0 || ::stat(path.c_str(), &named) != 0 || mine.st_ino != named.st_ino ||
            mine.st_dev != named.st_dev) {
          ::close(fd);
          if (attempt < 10) continue;
          throw std::runtime_error("cannot lock " + display_path(path) + ": it keeps being replaced by another process");
        }
        const Owner stale = read_owner(fd);
        if (stale.known() && warn)
          warn("taking over the stale lock " + display_path(path) + " of " + stale.describe() +
               ", which is no longer running");
        write_owner(fd);
        held_.push_back({path, fd});
        break;
      }
    }
  } catch (...) {
    release();
    throw;
  }
}

RunLock::~RunLock() { release(); }

void RunLock::release() {
  // Remove before unlocking, so that nobody takes over a file about to disappear.
  for (const Held& h : held_) {
    ::unlink(h.path.c_str());
    ::close(h.fd);
  }
  held_.clear();
}

}  // namespace tptrain::io
