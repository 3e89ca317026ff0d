#include "src/data/mapped_file.hpp"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "io/deck_path.hpp"
#include "io/path_text.hpp"
#include "src/data/data_error.hpp"

namespace tptrain::data {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw DataError("data file '" + io::display_path(path) + "': " + problem);
}

// The guarded read of this thread (MappedFile::read_guarded): where to jump back to, and the
// mapping whose faults it takes. Faults anywhere else are not ours.
struct GuardedRead {
  sigjmp_buf jump;
  const unsigned char* begin;
  const unsigned char* end;
};
thread_local GuardedRead* t_read = nullptr;
struct sigaction g_previous_bus {};

extern "C" void on_sigbus(int signal, siginfo_t* info, void* context) {
  GuardedRead* r = t_read;
  const auto* address = static_cast<const unsigned char*>(info->si_addr);
  if (r != nullptr && address >= r->begin && address < r->end) siglongjmp(r->jump, 1);
  // Not a read of a mapped data file: whoever handled SIGBUS before (the MPI library's
  // backtrace, or the default core dump) handles it, as if this handler were not there.
  if ((g_previous_bus.sa_flags & SA_SIGINFO) != 0 && g_previous_bus.sa_sigaction != nullptr) {
    g_previous_bus.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous_bus.sa_handler != SIG_DFL && g_previous_bus.sa_handler != SIG_IGN) {
    g_previous_bus.sa_handler(signal);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);  // the faulting access runs again and ends the process
}

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;  // SA_NODEFER: a later fault of the same thread is caught too
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous_bus);
  });
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
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
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, static_cast<std::size_t>(size_));
    path_ = std::move(other.path_);
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

bool MappedFile::guarded(void (*read)(void*), void* context) const {
  install_sigbus_handler();
  GuardedRead r{{}, data_, data_ + size_};
  GuardedRead* const outer = t_read;
  // Restores the outer guard on every way out: return, exception, or the jump below.
  struct Restore {
    GuardedRead* outer;
    ~Restore() { t_read = outer; }
  } restore{outer};
  if (sigsetjmp(r.jump, 1) != 0) return false;  // 1: the signal mask is restored too
  t_read = &r;
  read(context);
  return true;
}

void MappedFile::fail_truncated() const {
  fail(path_, "became shorter than its " + std::to_string(size_) +
                  " bytes while it was read (cut or replaced under the running job): restore it and run again");
}

}  // namespace tptrain::data
