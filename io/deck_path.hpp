// Files named by a deck or on the command line: can this path be read as a regular file, and if
// not, why not in words. Checked before anything opens the file for reading, because a FIFO or
// a device (/dev/zero, /dev/urandom) would never end a read, and a bare "does not exist" hides
// the real reason (permission denied, a name too long, a component that is not a directory).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tptrain::io {

// "" when `path` names a regular file this process can open for reading; otherwise the reason,
// to follow the path in a sentence: "does not exist", "is a directory, not a regular file",
// "is not a regular file (a FIFO)", "cannot be accessed: permission denied (EACCES)",
// "cannot be accessed: the file name is too long (ENAMETOOLONG)". `size` gets the size in bytes.
std::string regular_file_problem(const std::string& path, std::uint64_t* size = nullptr);

// Reads the regular file `path` into `text` if it holds at most `max_bytes`: "" on success,
// otherwise the reason as above, or "is 2000000 bytes, more than the limit of 1048576 bytes".
// The size is checked before reading, and the read stops at the limit whatever happens to the
// file meanwhile.
std::string read_regular_file(const std::string& path, std::uint64_t max_bytes, std::string& text);

// The reason for an errno from opening or examining a path, as above ("does not exist",
// "cannot be accessed: ... (ENOTDIR)").
std::string errno_problem(int err);

}  // namespace tptrain::io
