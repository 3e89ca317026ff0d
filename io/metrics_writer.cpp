#include "io/metrics_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/metrics_resume.hpp"
#include "io/path_text.hpp"

namespace tptrain::io {

namespace {

std::string reason(int error) { return std::strerror(error); }

}  // namespace

MetricsWriter::MetricsWriter(const std::string& dir, std::int64_t resumed_step, void (*warn)(const std::string&)) {
  if (dir.empty()) return;
  std::filesystem::create_directories(dir);
  path_ = (std::filesystem::path(dir) / kFileName).string();
  const std::string shown = display_path(path_);
  // O_RDWR | O_NONBLOCK: a FIFO in the file's place opens at once (and is refused below) instead
  // of waiting for a reader.
  const int flags = O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK | (resumed_step > 0 ? 0 : O_TRUNC);
  fd_ = ::open(path_.c_str(), flags, 0644);
  if (fd_ < 0) throw std::runtime_error(fmt::format("cannot open {} for writing: {}", shown, reason(errno)));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(fmt::format("{} is not a regular file: move it away and run again", shown));
  }
  if (resumed_step == 0) return;

  std::ifstream in(path_, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot read {}: {}", shown, reason(errno)));
  const MetricsPrefix kept = metrics_prefix(in, path_, resumed_step);
  if (kept.cut_line > 0 && warn != nullptr)
    warn(fmt::format("{}:{}: the last line was cut off (the run that wrote it ended in the middle of it): "
                     "dropped {}",
                     shown, kept.cut_line, kept.cut_text));
  if (kept.bytes < static_cast<std::uint64_t>(st.st_size) &&
      ::ftruncate(fd_, static_cast<off_t>(kept.bytes)) != 0)
    throw std::runtime_error(fmt::format("cannot cut {} back to the records up to step {}: {}", shown,
                                         resumed_step, reason(errno)));
  size_ = kept.bytes;
  last_step_ = kept.last_step;
  if (kept.add_newline) {
    if (::write(fd_, "\n", 1) != 1)
      throw std::runtime_error(fmt::format("cannot write to {}: {}", shown, reason(errno)));
    ++size_;
  }
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::write(const MetricsRecord& r) {
  if (fd_ < 0) return;
  const std::string line = to_json(r) + '\n';
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int error = n < 0 ? errno : ENOSPC;  // a regular file that takes 0 bytes is full
    // Whole records only: the part of this line that was written goes again.
    const bool cut_back = done == 0 || ::ftruncate(fd_, static_cast<off_t>(size_)) == 0;
    const std::string holds = last_step_ > 0 ? fmt::format("the file ends with the record of step {}", last_step_)
                                             : std::string("the file holds no record");
    throw MetricsWriteError(fmt::format("cannot write the record of step {} to {}: {}; {}{}", r.step,
                                        display_path(path_), reason(error), holds,
                                        cut_back ? "" : " and a cut line, which a resumed run drops"));
  }
  size_ += line.size();
  last_step_ = r.step;
}

void MetricsWriter::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  const bool synced = ::fsync(fd) == 0;
  const int sync_error = errno;
  if (::close(fd) != 0 || !synced)
    throw MetricsWriteError(fmt::format("cannot write {} to the storage: {}", display_path(path_),
                                        reason(synced ? errno : sync_error)));
}

}  // namespace tptrain::io
