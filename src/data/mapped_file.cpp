#include "src/data/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "io/deck_path.hpp"
#include "io/path_text.hpp"
#include "src/data/data_error.hpp"

namespace tptrain::data {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw DataError("data file '" + io::display_path(path) + "': " + problem);
}

}  // namespace

MappedFile::MappedFile(const std::string& path) {
  // Before open(2): a FIFO would block it, and "does not exist" hides EACCES or ENAMETOOLONG.
  if (const std::string problem = io::regular_file_problem(path); !problem.empty())
    fail(path, problem == "does not exist" ? "no such file" : problem);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open for reading: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, std::string("cannot determine the file size: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {  // replaced between the check and the open
    ::close(fd);
    fail(path, "is not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    fail(path, "empty file");
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
  void* p = ::mmap(nullptr, static_cast<std::size_t>(size_), PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) fail(path, std::string("cannot map the file into memory: ") + std::strerror(err));
  data_ = static_cast<unsigned char*>(p);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, static_cast<std::size_t>(size_));
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, static_cast<std::size_t>(size_));
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::advise_random() const {
  // Advice only: a kernel that ignores it reads more, never wrongly.
  ::madvise(data_, static_cast<std::size_t>(size_), MADV_RANDOM);
}

void MappedFile::release(std::uint64_t offset, std::uint64_t bytes) const {
  if (bytes == 0 || offset >= size_) return;
  // A fault maps a window of up to kRelease bytes around the faulting page (fault-around, aligned
  // in virtual addresses, not file offsets): widen by kRelease on both sides.
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t begin = (offset > kRelease ? offset - kRelease : 0) / page * page;
  const std::uint64_t end = std::min(size_, offset + bytes + kRelease);
  // MADV_DONTNEED on a read-only shared file mapping cannot lose data: the next read refaults
  // the page from the page cache (or the file).
  ::madvise(data_ + begin, static_cast<std::size_t>(end - begin), MADV_DONTNEED);
}

}  // namespace tptrain::data
