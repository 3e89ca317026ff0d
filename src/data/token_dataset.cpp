#include "src/data/token_dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>

#include "base/splitmix64.hpp"
#include "io/data_paths.hpp"
#include "io/path_text.hpp"

namespace tptrain::data {

// One file of the stream: its tokens are `count` little-endian integers of `width` bytes at
// `tokens` (in the mapping, or in `owned` for a synthetic dataset).
struct TokenDataset::File {
  std::string path;
  std::optional<MappedFile> map;
  std::vector<unsigned char> owned;
  const unsigned char* tokens = nullptr;
  std::uint64_t token_offset = 0;  // byte offset of the first token in the file
  int width = 2;          // bytes per token: 1 (.txt), 2 or 4 (.bin version 1 or 2)
  std::int32_t version = 0;  // .bin: the shard version
  std::size_t first = 0;  // stream index of its first token
  std::size_t count = 0;

  std::int32_t token(std::size_t i) const {
    const unsigned char* p = tokens + i * static_cast<std::size_t>(width);
    if (width == 1) return p[0];
    if (width == 2) return static_cast<std::int32_t>(p[0] | (p[1] << 8));
    // An id above INT32_MAX reads as INT32_MAX: no vocabulary holds it, so the check refuses it.
    const std::uint32_t u = static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                            static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
    return u > 0x7FFFFFFFu ? 0x7FFFFFFF : static_cast<std::int32_t>(u);
  }
  // Runs read(), which reads this file's tokens; a file cut shorter under its mapping is a
  // DataError naming it (MappedFile::read_guarded), not a bus error.
  template <class Read>
  void read(Read&& r) const {
    if (map)
      map->read_guarded(r);
    else
      r();
  }
  // Drops the pages that reading tokens [i, i + n) mapped (mapped_file.hpp).
  void release(std::size_t i, std::size_t n) const {
    if (map) map->release(token_offset + i * static_cast<std::size_t>(width), n * static_cast<std::size_t>(width));
  }
};

namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw DataError("data file '" + io::display_path(path) + "': " + problem);
}

std::string lower_extension(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

}  // namespace

TokenDataset::TokenDataset() = default;
TokenDataset::TokenDataset(TokenDataset&&) noexcept = default;
TokenDataset& TokenDataset::operator=(TokenDataset&&) noexcept = default;
TokenDataset::~TokenDataset() = default;

TokenDataset TokenDataset::open(const std::string& spec, int vocab_size, std::uint64_t check_at_open_bytes) {
  if (vocab_size <= 0) fail(spec, "vocab_size must be positive, got " + std::to_string(vocab_size));
  const io::DataPaths paths = io::expand_data_paths(spec);
  if (!paths.problem.empty()) throw DataError("data '" + io::display_path(spec) + "' " + paths.problem);

  TokenDataset ds;
  ds.path_ = spec;
  ds.vocab_size_ = vocab_size;
  std::string recorded;  // the first file whose header records its vocabulary
  for (const std::string& path : paths.files) {
    const std::string ext = lower_extension(path);
    if (ext != ".txt" && ext != ".bin")
      fail(path, "unknown extension '" + ext + "': expected .txt (byte tokens) or .bin (llm.c token shard)");
    File f;
    f.path = path;
    f.map.emplace(path);
    f.first = ds.size_;
    if (ext == ".txt") {
      f.width = 1;
      f.count = f.map->size();
    } else {
      if (f.map->size() < kShardHeaderBytes)
        fail(path, fmt::format("file is shorter than the llm.c shard header ({} bytes, the header alone needs {})",
                               f.map->size(), kShardHeaderBytes));
      const ShardHeader h = parse_shard_header(f.map->data(), f.map->size(), path);
      f.map->release(0, kShardHeaderBytes);
      f.width = h.token_bytes();
      f.version = h.version;
      f.token_offset = kShardHeaderBytes;
      f.count = h.tokens;
      if (!ds.files_.empty() && ds.files_.front().width != 1 && ds.files_.front().version != f.version)
        throw DataError(fmt::format("data '{}' mixes shard versions: '{}' is {}, '{}' is {}: one version per set "
                                    "(tokenize the set again with one tokenizer)",
                                    io::display_path(spec), io::display_path(ds.files_.front().path),
                                    describe_version(ds.files_.front().version), io::display_path(path),
                                    describe_version(f.version)));
      if (h.vocabulary.recorded()) {
        if (recorded.empty()) {
          ds.vocabulary_ = h.vocabulary;
          recorded = path;
        } else if (h.vocabulary != ds.vocabulary_) {
          throw DataError(fmt::format("data '{}' mixes vocabularies: '{}' records {}, '{}' records {}",
                                      io::display_path(spec), io::display_path(recorded),
                                      describe(ds.vocabulary_), io::display_path(path), describe(h.vocabulary)));
        }
        if (h.vocabulary.size > vocab_size)
          fail(path, fmt::format("its header records the vocabulary {}: more than vocab_size {} (the model's "
                                 "vocabulary: set model.vocab_size >= {})",
                                 describe(h.vocabulary), vocab_size, h.vocabulary.size));
      }
    }
    if (!ds.files_.empty() && (ds.files_.front().width == 1) != (f.width == 1)) {
      const File& txt = f.width == 1 ? f : ds.files_.front();
      const File& bin = f.width == 1 ? ds.files_.front() : f;
      throw DataError(fmt::format("data '{}' mixes .txt files (byte tokens), e.g. '{}', with .bin shards (llm.c "
                                  "tokens), e.g. '{}': one kind per set",
                                  io::display_path(spec), io::display_path(txt.path), io::display_path(bin.path)));
    }
    f.map->advise_random();
    f.tokens = f.map->data() + f.token_offset;
    ds.size_ += f.count;
    ds.files_.push_back(std::move(f));
  }
  std::uint64_t bytes = 0;
  for (const File& f : ds.files_) bytes += f.count * static_cast<std::uint64_t>(f.width);
  if (bytes <= check_at_open_bytes) {
    constexpr std::size_t kChunk = std::size_t{1} << 20;  // tokens read, then released
    for (const File& f : ds.files_)
      for (std::size_t at = 0; at < f.count; at += kChunk) ds.check_tokens(f, at, std::min(kChunk, f.count - at));
  }
  return ds;
}

TokenDataset TokenDataset::synthetic(std::size_t n, int vocab_size, std::uint64_t seed) {
  if (vocab_size <= 0) fail("(synthetic)", "vocab_size must be positive, got " + std::to_string(vocab_size));
  const std::uint64_t range = static_cast<std::uint64_t>(vocab_size);
  TokenDataset ds;
  ds.path_ = "(synthetic)";
  ds.vocab_size_ = vocab_size;
  File f;
  f.path = ds.path_;
  f.width = shard_token_bytes(shard_version_for(range));  // as a shard of that vocabulary holds them
  f.owned.resize(static_cast<std::size_t>(f.width) * n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto t = static_cast<std::uint32_t>(util::splitmix64(seed ^ (0x5EEDull << 32) ^ i) % range);
    for (int b = 0; b < f.width; ++b)
      f.owned[static_cast<std::size_t>(f.width) * i + static_cast<std::size_t>(b)] =
          static_cast<unsigned char>(t >> (8 * b));
  }
  f.tokens = f.owned.data();
  f.count = n;
  ds.size_ = n;
  if (n > 0) ds.files_.push_back(std::move(f));
  return ds;
}

std::size_t TokenDataset::file_count() const { return files_.size(); }

const std::string& TokenDataset::file_path(std::size_t k) const {
  if (k >= files_.size())
    throw DataError(fmt::format("data '{}': file {} out of range ({} files)", io::display_path(path_), k, files_.size()));
  return files_[k].path;
}

std::size_t TokenDataset::file_first_token(std::size_t k) const {
  file_path(k);  // the range check
  return files_[k].first;
}

template <class Visit>
void TokenDataset::for_pieces(std::size_t offset, std::size_t n, Visit&& visit) const {
  // The file holding `offset`: the last one starting at or before it.
  auto it = std::upper_bound(files_.begin(), files_.end(), offset,
                             [](std::size_t o, const File& f) { return o < f.first; });
  std::size_t k = static_cast<std::size_t>(it - files_.begin()) - 1;
  while (n > 0) {
    const File& f = files_[k];
    const std::size_t at = offset - f.first;
    const std::size_t take = std::min(n, f.count - at);
    visit(f, at, take);
    offset += take;
    n -= take;
    ++k;
  }
}

void TokenDataset::check_range(std::size_t offset, int seq_length) const {
  if (seq_length <= 0) fail(path_, "seq_length must be positive, got " + std::to_string(seq_length));
  const std::size_t s = static_cast<std::size_t>(seq_length);
  if (offset >= size_ || size_ - offset < s + 1)
    fail(path_, "sequence at offset " + std::to_string(offset) + " of length " + std::to_string(s + 1) +
                    " runs past the end (" + std::to_string(size_) + " tokens)");
}

namespace {

[[noreturn]] void token_out_of_vocabulary(const std::string& path, std::int32_t token, std::size_t index,
                                          int vocab_size) {
  fail(path, fmt::format("token {} at index {} is >= vocab_size {}", token, index, vocab_size));
}

}  // namespace

std::int32_t TokenDataset::operator[](std::size_t i) const {
  if (i >= size_)
    fail(path_, "token index " + std::to_string(i) + " out of range (size " + std::to_string(size_) + ")");
  std::int32_t value = 0;
  for_pieces(i, 1, [&](const File& f, std::size_t at, std::size_t) {
    f.read([&] { value = f.token(at); });
    f.release(at, 1);
    if (value >= vocab_size_) token_out_of_vocabulary(f.path, value, at, vocab_size_);
  });
  return value;
}

std::size_t TokenDataset::num_windows(int seq_length) const {
  if (seq_length <= 0) fail(path_, "seq_length must be positive, got " + std::to_string(seq_length));
  if (size_ < 2) return 0;
  return (size_ - 1) / static_cast<std::size_t>(seq_length);
}

void TokenDataset::window(std::size_t j, int seq_length, std::int32_t* inputs, std::int32_t* targets) const {
  const std::size_t n = num_windows(seq_length);
  if (j >= n)
    fail(path_, "evaluation window " + std::to_string(j) + " out of range: " + std::to_string(size_) +
                    " tokens hold " + std::to_string(n) + " windows of seq_length " + std::to_string(seq_length));
  copy_sequence(j * static_cast<std::size_t>(seq_length), seq_length, inputs, targets);
}

void TokenDataset::copy_sequence(std::size_t offset, int seq_length, std::int32_t* inputs,
                                 std::int32_t* targets) const {
  check_range(offset, seq_length);
  const std::size_t s = static_cast<std::size_t>(seq_length);
  std::size_t j = 0;  // position in the sequence, 0 .. s
  for_pieces(offset, s + 1, [&](const File& f, std::size_t at, std::size_t take) {
    std::size_t bad = take;  // the first token outside the vocabulary, reported after the read
    std::int32_t value = 0;
    f.read([&] {
      for (std::size_t i = 0; i < take; ++i, ++j) {
        const std::int32_t t = f.token(at + i);
        if (t >= vocab_size_) {
          bad = i;
          value = t;
          return;
        }
        if (j < s) inputs[j] = t;
        if (j > 0) targets[j - 1] = t;
      }
    });
    f.release(at, take);
    if (bad < take) token_out_of_vocabulary(f.path, value, at + bad, vocab_size_);
  });
}

void TokenDataset::check_tokens(const File& f, std::size_t at, std::size_t n) const {
  std::size_t bad = n;
  std::int32_t value = 0;
  f.read([&] {
    for (std::size_t i = 0; i < n; ++i)
      if (const std::int32_t t = f.token(at + i); t >= vocab_size_) {
        bad = i;
        value = t;
        return;
      }
  });
  f.release(at, n);
  if (bad < n) token_out_of_vocabulary(f.path, value, at + bad, vocab_size_);
}

void TokenDataset::check_sequence(std::size_t offset, int seq_length) const {
  check_range(offset, seq_length);
  for_pieces(offset, static_cast<std::size_t>(seq_length) + 1,
             [&](const File& f, std::size_t at, std::size_t take) { check_tokens(f, at, take); });
}

std::int32_t TokenDataset::shard_version() const { return files_.empty() ? 0 : files_.front().version; }

std::string other_tokenizer_warning(const TokenDataset& d, const std::string& what, const std::string& tokenizer) {
  if (d.vocabulary().tokenizer == 0) return {};
  if (shard_vocabulary(tokenizer, 1).tokenizer == d.vocabulary().tokenizer) return {};
  return fmt::format("{} = {}: its shards were tokenized with {}, but data.tokenizer = \"{}\": generate and eval will "
                     "encode and decode with {} (set data.tokenizer to the shards' tokenizer)",
                     what, d.path(), describe(d.vocabulary()), tokenizer, tokenizer);
}

}  // namespace tptrain::data
