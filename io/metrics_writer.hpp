// <run.dir>/metrics.jsonl, written by rank 0 (docs/design.md, "Run outputs"): every write is
// checked. A full file system (ENOSPC), a file size limit (EFBIG), a short write or a failed
// close is a MetricsWriteError naming the file, the step and the reason, never a record lost
// in silence; the trainer stops the run on it (a resumed run logs the missing steps again).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "io/metrics.hpp"

namespace tptrain::io {

class MetricsWriteError : public std::runtime_error {
 public:
  using runtime_error::runtime_error;
};

class MetricsWriter {
 public:
  // dir empty: writes nothing (ranks other than 0). resumed_step 0: a new file. resumed_step >
  // 0: the records up to that step are kept and the file continues (io/metrics_resume.hpp);
  // a cut last line is dropped and `warn` is told which. Throws std::runtime_error naming the
  // file when it is not a regular file, cannot be opened or read, or holds a line that is not
  // a record.
  MetricsWriter(const std::string& dir, std::int64_t resumed_step, void (*warn)(const std::string&));
  ~MetricsWriter();  // closes the file if close() was not called, without a check
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Appends the record's line. On failure the partial line is cut off again (the file keeps
  // whole records) and MetricsWriteError is thrown.
  void write(const MetricsRecord& r);
  // Flushes to the storage (fsync) and closes; throws MetricsWriteError when either fails
  // (network file systems report a full disk there).
  void close();
  const std::string& path() const { return path_; }

  static constexpr const char* kFileName = "metrics.jsonl";

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;      // bytes of whole records in the file
  std::int64_t last_step_ = 0;  // step of the last record written, 0 if none
};

}  // namespace tptrain::io
