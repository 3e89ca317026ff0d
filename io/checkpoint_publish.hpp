// The file-system side of writing a checkpoint, in plain POSIX: the reasons HDF5 and MPI-IO
// lose. The MPI-IO driver reports a full disk, a file size limit or a permission problem as
// MPI_ERR_OTHER at best, so the writer asks the file system itself, before HDF5 holds anything
// it cannot write back: libhdf5 1.10 frees a file whose H5Fclose failed but keeps its ID, and
// MPI_Finalize then crashes closing it. Hence: probe that <path>.tmp can be created, reserve its
// full size up front, and only then let HDF5 fill it; publish with fsync + rename.
#pragma once

#include <cstdint>
#include <string>

namespace tptrain::io::detail {

// Creates (or truncates) `tmp` and closes it. "" or "permission denied: <tmp>", "cannot create
// <tmp>: <errno text>".
std::string probe_create(const std::string& tmp);

// Reserves `bytes` for `tmp`, just created by HDF5 and still empty (fallocate; HDF5 sets the
// final size when it closes the file). "" when done or not supported by the file system; else
// "cannot reserve N bytes for <tmp>: No space left on device" (or File too large, Disk quota
// exceeded, ...), after giving back whatever was reserved.
std::string reserve_space(const std::string& tmp, std::uint64_t bytes);

// After a failed HDF5 write: why writing to `tmp` fails now, as the operating system says it
// ("No space left on device"), found by trying to extend the file by one block; "" when the
// file system accepts the write (the failure had another cause).
std::string write_failure_reason(const std::string& tmp);

// Makes `tmp` durable (fsync), renames it to `path` (atomic on POSIX), fsyncs the directory.
// "" or what failed, with the errno text.
std::string publish(const std::string& tmp, const std::string& path);

// Removes `path` if it exists; errors are ignored (clean-up after a failure already reported).
void remove_quietly(const std::string& path);

}  // namespace tptrain::io::detail
