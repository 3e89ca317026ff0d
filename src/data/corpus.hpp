// The input of `tptrain tokenize`: text files (each one document) and JSON Lines files (each
// line one document, its "text" field), read as one stream of bytes in the order given. Plain
// C++17: no MPI.
//
// The stream is cut into segments (units of work, tokenized independently) only at points that
// change no token: a file's start, and
//   - in JSON Lines, a line's start;
//   - in a text file, the start of a line whose first byte is printable ASCII other than the
//     space (0x21..0x7E), after a line whose last byte is one too: "x\nY". GPT-2's pre-tokenizer
//     makes the newline a piece of its own there, whether Y follows or the text ends (a longer run
//     of white space would not do: "\n\n" before Y is two pieces, at the end of a text one); no
//     piece runs from a non-space into white space, a newline is never the space that ` ?\p{L}+`
//     takes along, and the pattern looks only ahead, so Y and what follows are cut the same way.
// So the tokens of a segment depend only on its bytes, and the output of any split equals the
// output of none: the same for every number of ranks (tests/cli_tokenize_tests.cmake).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "src/data/data_error.hpp"

namespace tptrain::data {

struct CorpusFile {
  std::string path;
  std::uint64_t size = 0;
  bool json_lines = false;  // the name ends in .jsonl
};

// Part of a document: its text (UTF-8 not yet checked for text files; JSON Lines text is UTF-8),
// whether the document starts with it, and where it comes from (for messages).
struct DocumentPart {
  std::string_view text;
  bool starts_document = false;
  std::size_t file = 0;        // index into Corpus::files()
  std::uint64_t offset = 0;    // byte offset in that file (of the text, or of the JSON line)
  bool from_json = false;      // text is a decoded "text" field, offsets inside it are not the file's
};

class Corpus {
 public:
  // Checks every path: a readable regular file that is not empty. Throws DataError naming the
  // file and the problem (all problems, one per line).
  explicit Corpus(const std::vector<std::string>& paths);

  const std::vector<CorpusFile>& files() const { return files_; }
  std::uint64_t total_bytes() const { return total_; }

  // The first cut point (see the top of this file) at or after stream offset x; total_bytes()
  // when there is none. Reads the file from x on until it finds one.
  std::uint64_t cut_at_or_after(std::uint64_t x) const;

  // Reads stream bytes [begin, end), two cut points, and calls `part` for every document part,
  // in order: a text file's bytes in the range (one part per file), each JSON line's "text"
  // (a blank line is skipped). Throws DataError naming the file, byte offset (and line) for a
  // JSON line that is not valid UTF-8, not JSON, not an object or without a string "text", or a
  // file that changed size since it was opened.
  void read(std::uint64_t begin, std::uint64_t end, const std::function<void(const DocumentPart&)>& part) const;

  // Throws DataError naming the first file whose size is not the one it had when opened (or that
  // is gone): the shards of a tokenize hold the inputs as they were, or are not published.
  void check_unchanged() const;

  // "FILE, byte offset N" (and ", line L" for JSON Lines), for messages.
  std::string where(std::size_t file, std::uint64_t offset) const;

 private:
  std::size_t file_at(std::uint64_t x) const;  // the file holding stream offset x < total_
  std::string read_bytes(std::size_t file, std::uint64_t offset, std::uint64_t length) const;
  DataError shrunk(std::size_t file) const;  // "FILE is shorter than when tokenize started"

  std::vector<CorpusFile> files_;
  std::vector<std::uint64_t> start_;  // stream offset of each file; start_.back() = total_
  std::uint64_t total_ = 0;
};

}  // namespace tptrain::data
