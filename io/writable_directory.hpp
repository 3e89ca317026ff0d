// Output directories of a run (run.dir, checkpoint.dir): is it possible to write there?
//
// Asked before step 1, so that a run never trains for hours and then fails (or, worse, hangs
// other ranks) when its first checkpoint cannot be written. Messages name the deck key, the
// path and the reason (errno text: "Permission denied", "Not a directory", "File name too
// long", "Read-only file system", ...).
#pragma once

#include <string>

namespace tptrain::io {

// "" when `path` is an existing writable directory, or could be created as one: its nearest
// existing ancestor is a writable, searchable directory and every missing component has a legal
// length. Creates nothing (tptrain check). Otherwise why not, without the key.
std::string directory_problem(const std::string& path);

// Creates `path` (and parents) if missing and proves it writable by creating and removing a
// probe file. Throws std::runtime_error naming `key`, the path and the reason.
void prepare_writable_directory(const std::string& path, const std::string& key);

}  // namespace tptrain::io
