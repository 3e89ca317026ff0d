#include "src/data/token_dataset.hpp"

#include "base/splitmix64.hpp"

#include "io/deck_path.hpp"
#include "io/path_text.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace tptrain::data {
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

// An open input file and its size in bytes, or a DataError saying why not.
struct InputFile {
  std::ifstream in;
  std::size_t size = 0;
};

InputFile open_input(const std::string& path) {
  // Before the stream opens it: a FIFO or a device (/dev/zero) would never end the read.
  if (const std::string problem = io::regular_file_problem(path); !problem.empty())
    fail(path, problem == "does not exist" ? "no such file" : problem);
  InputFile f;
  f.in.open(path, std::ios::binary);
  if (!f.in) fail(path, std::string("cannot open for reading: ") + std::strerror(errno));
  f.in.seekg(0, std::ios::end);
  const std::streamoff end = f.in.tellg();
  if (end < 0) fail(path, "cannot determine the file size");
  f.in.seekg(0, std::ios::beg);
  f.size = static_cast<std::size_t>(end);
  return f;
}

void read_exactly(InputFile& f, const std::string& path, void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  if (!f.in.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes)))
    fail(path, "read error: got " + std::to_string(f.in.gcount()) + " of " +
                   std::to_string(bytes) + " bytes");
}

// Little-endian loads, independent of the host byte order.
std::int32_t load_i32(const unsigned char* p) {
  const std::uint32_t u = static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                          static_cast<std::uint32_t>(p[2]) << 16 |
                          static_cast<std::uint32_t>(p[3]) << 24;
  std::int32_t v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

bool host_is_little_endian() {
  const std::uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

std::vector<std::uint16_t> read_text(InputFile& f, const std::string& path) {
  std::vector<unsigned char> bytes(f.size);
  read_exactly(f, path, bytes.data(), bytes.size());
  return std::vector<std::uint16_t>(bytes.begin(), bytes.end());  // bytes as unsigned 0..255
}

std::vector<std::uint16_t> read_shard(InputFile& f, const std::string& path) {
  constexpr std::size_t header_bytes = kShardHeaderInts * sizeof(std::int32_t);
  if (f.size < header_bytes)
    fail(path, "file is shorter than the llm.c shard header (" + std::to_string(f.size) +
                   " bytes, the header alone needs " + std::to_string(header_bytes) + ")");
  unsigned char header[header_bytes];
  read_exactly(f, path, header, header_bytes);
  const std::int32_t magic = load_i32(header);
  if (magic != kShardMagic)
    fail(path, "bad magic number " + std::to_string(magic) + ", expected " +
                   std::to_string(kShardMagic) + " (not an llm.c token shard)");
  const std::int32_t version = load_i32(header + 4);
  if (version != kShardVersion)
    fail(path, "unsupported shard version " + std::to_string(version) + ", expected " +
                   std::to_string(kShardVersion) + " (uint16 tokens)");
  const std::int32_t count = load_i32(header + 8);
  if (count < 0) fail(path, "negative token count " + std::to_string(count) + " in the header");
  if (count == 0) fail(path, "the shard holds no tokens (header token count is 0)");
  const std::size_t expected = header_bytes + static_cast<std::size_t>(count) * 2;
  if (f.size != expected)
    fail(path, std::string(f.size < expected ? "file is shorter than" : "file is longer than") +
                   " its header claims: header says " + std::to_string(count) + " tokens = " +
                   std::to_string(expected) + " bytes, file has " + std::to_string(f.size) +
                   " bytes");
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(count));
  read_exactly(f, path, tokens.data(), tokens.size() * sizeof(std::uint16_t));
  if (!host_is_little_endian())
    for (auto& t : tokens) t = static_cast<std::uint16_t>((t >> 8) | (t << 8));
  return tokens;
}

}  // namespace

TokenDataset TokenDataset::open(const std::string& path, int vocab_size) {
  if (vocab_size <= 0) fail(path, "vocab_size must be positive, got " + std::to_string(vocab_size));
  const std::string ext = lower_extension(path);
  if (ext != ".txt" && ext != ".bin")
    fail(path, "unknown extension '" + ext +
                   "': expected .txt (byte tokens) or .bin (llm.c token shard)");

  InputFile f = open_input(path);
  if (f.size == 0) fail(path, "empty file");

  TokenDataset ds;
  ds.path_ = path;
  ds.tokens_ = ext == ".txt" ? read_text(f, path) : read_shard(f, path);

  const auto bad = std::find_if(ds.tokens_.begin(), ds.tokens_.end(), [vocab_size](std::uint16_t t) {
    return static_cast<int>(t) >= vocab_size;
  });
  if (bad != ds.tokens_.end())
    fail(path, "token " + std::to_string(*bad) + " at index " +
                   std::to_string(bad - ds.tokens_.begin()) + " is >= vocab_size " +
                   std::to_string(vocab_size));
  return ds;
}

TokenDataset TokenDataset::synthetic(std::size_t n, int vocab_size, std::uint64_t seed) {
  if (vocab_size <= 0) fail("(synthetic)", "vocab_size must be positive, got " + std::to_string(vocab_size));
  const std::uint64_t range = std::min<std::uint64_t>(static_cast<std::uint64_t>(vocab_size), 65536);
  TokenDataset ds;
  ds.path_ = "(synthetic)";
  ds.tokens_.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    ds.tokens_[i] = static_cast<std::uint16_t>(util::splitmix64(seed ^ (0x5EEDull << 32) ^ i) % range);
  return ds;
}

std::int32_t TokenDataset::operator[](std::size_t i) const {
  if (i >= tokens_.size())
    fail(path_, "token index " + std::to_string(i) + " out of range (size " +
                    std::to_string(tokens_.size()) + ")");
  return tokens_[i];
}

std::size_t TokenDataset::num_windows(int seq_length) const {
  if (seq_length <= 0)
    fail(path_, "seq_length must be positive, got " + std::to_string(seq_length));
  if (tokens_.size() < 2) return 0;
  return (tokens_.size() - 1) / static_cast<std::size_t>(seq_length);
}

void TokenDataset::window(std::size_t j, int seq_length, std::int32_t* inputs,
                          std::int32_t* targets) const {
  const std::size_t n = num_windows(seq_length);
  if (j >= n)
    fail(path_, "evaluation window " + std::to_string(j) + " out of range: " +
                    std::to_string(tokens_.size()) + " tokens hold " + std::to_string(n) +
                    " windows of seq_length " + std::to_string(seq_length));
  copy_sequence(j * static_cast<std::size_t>(seq_length), seq_length, inputs, targets);
}

void TokenDataset::copy_sequence(std::size_t offset, int seq_length, std::int32_t* inputs,
                                 std::int32_t* targets) const {
  if (seq_length <= 0)
    fail(path_, "seq_length must be positive, got " + std::to_string(seq_length));
  const std::size_t s = static_cast<std::size_t>(seq_length);
  if (offset >= tokens_.size() || tokens_.size() - offset < s + 1)
    fail(path_, "sequence at offset " + std::to_string(offset) + " of length " +
                    std::to_string(s + 1) + " runs past the end (" +
                    std::to_string(tokens_.size()) + " tokens)");
  const std::uint16_t* t = tokens_.data() + offset;
  for (std::size_t i = 0; i < s; ++i) {
    inputs[i] = t[i];
    targets[i] = t[i + 1];
  }
}

}  // namespace tptrain::data
