// A regular file mapped read-only into memory (POSIX mmap, MAP_SHARED): its bytes are read from
// the page cache when first touched, so opening a 20 GB file costs no memory and no reading.
//
// Resident memory: a touched page stays mapped into the process (and counts in its resident set)
// until it is released. release() drops the process's mapping of a range (madvise
// MADV_DONTNEED; for a read-only file mapping the page stays in the kernel's page cache, shared
// and reclaimable, and a later read faults it back in). A reader that releases what it touched
// keeps its resident set flat however large the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace tptrain::data {

class MappedFile {
 public:
  // Maps `path` whole. Throws DataError "data file 'PATH': ..." when it is not a readable
  // regular file (the reason in words, before anything opens it: a FIFO would block), is empty,
  // or cannot be mapped (with the system's reason). The descriptor is closed once mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  std::uint64_t size() const { return size_; }  // bytes, > 0

  // Tells the kernel the file is read at random places (no readahead around a fault: a
  // training sequence is a few KiB, readahead would read 128 KiB from the disk for it).
  void advise_random() const;
  // Drops the pages of bytes [offset, offset + bytes) from this process's resident set, and
  // those up to kRelease bytes either side (a fault maps its neighbours too: "fault-around").
  void release(std::uint64_t offset, std::uint64_t bytes) const;

  // Runs read(), which reads this mapping. A file cut shorter under the mapping (truncated while
  // the job runs) makes such a read fault with SIGBUS; here that is a DataError "data file
  // 'PATH': became shorter than its N bytes while it was read" instead of the end of the
  // process. An exception read() throws passes through. read() must hold no object that needs
  // its destructor run: a fault leaves it by siglongjmp.
  template <class Read>
  void read_guarded(Read&& read) const {
    using R = std::remove_reference_t<Read>;
    if (!guarded([](void* r) { (*static_cast<R*>(r))(); }, &read)) fail_truncated();
  }

  // 2 MiB: the largest fault-around window Linux allows with 4 KiB pages (default 64 KiB).
  static constexpr std::uint64_t kRelease = std::uint64_t{2} << 20;

 private:
  bool guarded(void (*read)(void*), void* context) const;  // false: read faulted in this mapping
  [[noreturn]] void fail_truncated() const;

  std::string path_;
  unsigned char* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace tptrain::data
