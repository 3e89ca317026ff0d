#include "src/data/corpus.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>

#include "io/deck_path.hpp"
#include "io/path_text.hpp"
#include "src/data/token_dataset.hpp"  // DataError
#include "text/json_line_text.hpp"
#include "text/text_error.hpp"
#include "text/utf8.hpp"

namespace tptrain::data {
namespace {

constexpr std::size_t kScanBlock = 1 << 16;

bool is_json_lines(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jsonl";
}

// A byte that may follow a text file's cut: printable ASCII, not the space.
bool starts_piece(char c) { return c >= 0x21 && c <= 0x7E; }

bool blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0)
      throw DataError("input '" + io::display_path(path) + "': cannot open for reading: " + std::strerror(errno));
  }
  ~ReadOnlyFile() { ::close(fd_); }
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  // Up to `length` bytes at `offset` (fewer only at the end of the file).
  std::string read(std::uint64_t offset, std::uint64_t length) const {
    std::string out(length, '\0');
    std::uint64_t got = 0;
    while (got < length) {
      const ssize_t n = ::pread(fd_, out.data() + got, length - got, static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        throw DataError("input '" + io::display_path(path_) + "': read error at byte offset " +
                        std::to_string(offset + got) + ": " + std::strerror(errno));
      if (n == 0) break;
      got += static_cast<std::uint64_t>(n);
    }
    out.resize(got);
    return out;
  }

 private:
  std::string path_;
  int fd_;
};

}  // namespace

Corpus::Corpus(const std::vector<std::string>& paths) {
  std::string problems;
  for (const std::string& path : paths) {
    CorpusFile f;
    f.path = path;
    f.json_lines = is_json_lines(path);
    std::string problem = io::regular_file_problem(path, &f.size);
    if (problem.empty() && f.size == 0) problem = "is empty (nothing to tokenize)";
    if (!problem.empty()) {
      problems += (problems.empty() ? "" : "\n") + std::string("input '") + io::display_path(path) + "' " + problem;
      continue;
    }
    start_.push_back(total_);
    total_ += f.size;
    files_.push_back(std::move(f));
  }
  if (!problems.empty()) throw DataError(problems);
  if (files_.empty()) throw DataError("no input files");
  start_.push_back(total_);
}

std::size_t Corpus::file_at(std::uint64_t x) const {
  // The last file starting at or before x (empty files cannot occur).
  return static_cast<std::size_t>(std::upper_bound(start_.begin(), start_.end() - 1, x) - start_.begin()) - 1;
}

DataError Corpus::shrunk(std::size_t file) const {
  return DataError("input '" + io::display_path(files_[file].path) + "' is shorter than when tokenize started (" +
                   std::to_string(files_[file].size) + " bytes): it changed while it was read");
}

std::string Corpus::read_bytes(std::size_t file, std::uint64_t offset, std::uint64_t length) const {
  std::string bytes = ReadOnlyFile(files_[file].path).read(offset, length);
  if (bytes.size() != length) throw shrunk(file);
  return bytes;
}

void Corpus::check_unchanged() const {
  for (std::size_t f = 0; f < files_.size(); ++f) {
    std::uint64_t size = 0;
    const std::string problem = io::regular_file_problem(files_[f].path, &size);
    if (!problem.empty())
      throw DataError("input '" + io::display_path(files_[f].path) + "' " + problem + " since tokenize started");
    if (size != files_[f].size)
      throw DataError("input '" + io::display_path(files_[f].path) + "' has " + std::to_string(size) +
                      " bytes, " + std::to_string(files_[f].size) + " when tokenize started: it changed while it was read");
  }
}

std::uint64_t Corpus::cut_at_or_after(std::uint64_t x) const {
  if (x >= total_) return total_;
  const std::size_t f = file_at(x);
  const CorpusFile& file = files_[f];
  const std::uint64_t o = x - start_[f];
  if (o == 0) return x;
  const ReadOnlyFile in(file.path);
  // Candidates c = o, o + 1, ...: a cut needs byte c - 1 (JSON Lines) or bytes c - 2 .. c
  // (text), so blocks start that far back and overlap by as much.
  const std::uint64_t back = file.json_lines ? 1 : 2;
  for (std::uint64_t from = o < back ? 0 : o - back; from < file.size; from += kScanBlock - back) {
    const std::uint64_t want = std::min<std::uint64_t>(kScanBlock, file.size - from);
    const std::string b = in.read(from, want);
    // A file cut while tokenize runs: the cuts past its new end would all fall at its old end,
    // so no segment would read (and notice) the missing bytes.
    if (b.size() != want) throw shrunk(f);
    for (std::size_t i = 0; i + back < b.size(); ++i) {
      const std::uint64_t c = from + i + back;
      const bool cut = file.json_lines ? b[i] == '\n' : starts_piece(b[i]) && b[i + 1] == '\n' && starts_piece(b[i + 2]);
      if (cut && c >= o) return start_[f] + c;
    }
    if (from + b.size() >= file.size) break;
  }
  return start_[f + 1];  // the file's end, the next file's start
}

void Corpus::read(std::uint64_t begin, std::uint64_t end, const std::function<void(const DocumentPart&)>& part) const {
  if (begin >= end) return;
  for (std::size_t f = file_at(begin); f < files_.size() && start_[f] < end; ++f) {
    const std::uint64_t lo = std::max(begin, start_[f]) - start_[f];
    const std::uint64_t hi = std::min(end, start_[f + 1]) - start_[f];
    const std::string bytes = read_bytes(f, lo, hi - lo);
    if (!files_[f].json_lines) {
      part(DocumentPart{bytes, lo == 0, f, lo, false});
      continue;
    }
    for (std::size_t at = 0; at < bytes.size();) {
      const std::size_t newline = bytes.find('\n', at);
      const std::size_t stop = newline == std::string::npos ? bytes.size() : newline;
      const std::string_view line(bytes.data() + at, stop - at);
      const std::uint64_t line_offset = lo + at;
      at = stop + 1;
      if (blank(line)) continue;
      if (const auto bad = text::utf8_problem(line))
        throw DataError(where(f, line_offset + bad->offset()) + ": not valid UTF-8 (" + bad->reason() + ")");
      std::string document;
      try {
        document = text::json_line_text(line);
      } catch (const text::TextError& e) {
        throw DataError(where(f, line_offset) + ": " + e.what());
      }
      part(DocumentPart{document, true, f, line_offset, true});
    }
  }
}

std::string Corpus::where(std::size_t file, std::uint64_t offset) const {
  const CorpusFile& f = files_[file];
  std::string out = "input '" + io::display_path(f.path) + "', byte offset " + std::to_string(offset);
  if (f.json_lines) {
    // Counted only for a message: the lines before the offset.
    std::uint64_t lines = 1;
    const ReadOnlyFile in(f.path);
    for (std::uint64_t from = 0; from < offset; from += kScanBlock) {
      const std::string block = in.read(from, std::min<std::uint64_t>(kScanBlock, offset - from));
      lines += static_cast<std::uint64_t>(std::count(block.begin(), block.end(), '\n'));
      if (block.empty()) break;
    }
    out += ", line " + std::to_string(lines);
  }
  return out;
}

}  // namespace tptrain::data
