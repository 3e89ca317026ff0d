#include "src/data/shard_writer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

#include "io/path_text.hpp"
#include "src/data/shard_header.hpp"

namespace tptrain::data {
namespace {

constexpr std::uint64_t kHeaderBytes = kShardHeaderInts * sizeof(std::int32_t);

std::string shard_name(bool valid, std::uint64_t index) {
  return fmt::format("{}_{:06d}.bin", valid ? "valid" : "train", index);
}

// Where stream token t goes: its shard and its index in that shard; `room` tokens from t on
// go to the same shard.
struct Place {
  std::string name;
  std::uint64_t index = 0;
  std::uint64_t room = 0;
};

Place place_of(const ShardLayout& layout, std::uint64_t t) {
  const bool valid = t < layout.valid_tokens;
  const std::uint64_t u = valid ? t : t - layout.valid_tokens;
  const std::uint64_t index = u % layout.shard_tokens;
  std::uint64_t room = layout.shard_tokens - index;
  if (valid) room = std::min(room, layout.valid_tokens - t);
  return Place{shard_name(valid, u / layout.shard_tokens), index, room};
}

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw DataError(fmt::format("output '{}': {}: {}", io::display_path(path), what, std::strerror(err)));
}

void write_all(int fd, const std::string& path, const unsigned char* bytes, std::size_t n, std::uint64_t offset) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, bytes, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(path, fmt::format("cannot write {} bytes at offset {}", n, offset), errno);
    bytes += w;
    n -= static_cast<std::size_t>(w);
    offset += static_cast<std::uint64_t>(w);
  }
}

}  // namespace

std::vector<ShardFile> shard_files(const ShardLayout& layout, std::uint64_t total) {
  std::vector<ShardFile> out;
  const std::uint64_t valid = std::min(layout.valid_tokens, total);
  for (int kind = 0; kind < 2; ++kind) {
    const std::uint64_t count = kind == 0 ? valid : total - valid;
    for (std::uint64_t i = 0; i * layout.shard_tokens < count; ++i)
      out.push_back({shard_name(kind == 0, i), std::min(layout.shard_tokens, count - i * layout.shard_tokens)});
  }
  return out;
}

ShardWriter::ShardWriter(std::string dir, ShardLayout layout) : dir_(std::move(dir)), layout_(layout) {
  if (layout_.shard_tokens == 0 || layout_.shard_tokens > kMaxShardTokens)
    throw DataError(fmt::format("tokens per shard must be 1 .. {}, got {}", kMaxShardTokens, layout_.shard_tokens));
  if (layout_.version != kShardVersionU16 && layout_.version != kShardVersionU32)
    throw DataError(fmt::format("shard version {}: expected {} or {}", layout_.version, kShardVersionU16,
                                kShardVersionU32));
}

ShardWriter::~ShardWriter() {
  for (const auto& [name, fd] : open_) ::close(fd);
}

int ShardWriter::file(const std::string& name) {
  if (const auto it = open_.find(name); it != open_.end()) return it->second;
  const std::string path = (std::filesystem::path(dir_) / name).string();
  // No O_TRUNC: other ranks write other parts of the same file.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot open for writing", errno);
  open_.emplace(name, fd);
  return fd;
}

void ShardWriter::write(std::uint64_t first, const std::uint32_t* tokens, std::size_t n) {
  const std::size_t width = static_cast<std::size_t>(shard_token_bytes(layout_.version));
  std::vector<unsigned char> bytes;
  for (std::size_t i = 0; i < n;) {
    const Place p = place_of(layout_, first + i);
    const std::size_t run = static_cast<std::size_t>(std::min<std::uint64_t>(p.room, n - i));
    bytes.resize(width * run);
    unsigned char* out = bytes.data();
    const std::uint32_t* in = tokens + i;
    if (width == 2) {  // little-endian whatever the host; one loop per width, no inner loop
      for (std::size_t k = 0; k < run; ++k) {
        out[2 * k] = static_cast<unsigned char>(in[k]);
        out[2 * k + 1] = static_cast<unsigned char>(in[k] >> 8);
      }
    } else {
      for (std::size_t k = 0; k < run; ++k) {
        out[4 * k] = static_cast<unsigned char>(in[k]);
        out[4 * k + 1] = static_cast<unsigned char>(in[k] >> 8);
        out[4 * k + 2] = static_cast<unsigned char>(in[k] >> 16);
        out[4 * k + 3] = static_cast<unsigned char>(in[k] >> 24);
      }
    }
    write_all(file(p.name), (std::filesystem::path(dir_) / p.name).string(), bytes.data(), bytes.size(),
              kHeaderBytes + width * p.index);
    i += run;
  }
}

void ShardWriter::close() {
  std::string problem;
  for (const auto& [name, fd] : open_) {
    const std::string path = (std::filesystem::path(dir_) / name).string();
    // fsync: a shard is renamed into place only once its bytes are on the disk.
    if (::fsync(fd) != 0 && problem.empty()) problem = fmt::format("output '{}': fsync failed: {}", io::display_path(path), std::strerror(errno));
    if (::close(fd) != 0 && problem.empty()) problem = fmt::format("output '{}': close failed: {}", io::display_path(path), std::strerror(errno));
  }
  open_.clear();
  if (!problem.empty()) throw DataError(problem);
}

void write_shard_headers(const std::string& dir, const ShardLayout& layout, std::uint64_t total) {
  for (const ShardFile& shard : shard_files(layout, total)) {
    const std::string path = (std::filesystem::path(dir) / shard.name).string();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail(path, "cannot open to write its header", errno);
    struct stat st {};
    const std::uint64_t expected =
        kHeaderBytes + static_cast<std::uint64_t>(shard_token_bytes(layout.version)) * shard.tokens;
    if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != expected) {
      ::close(fd);
      throw DataError(fmt::format("output '{}' is {} bytes, expected {} for {} tokens: some tokens were not written",
                                  io::display_path(path), st.st_size, expected, shard.tokens));
    }
    unsigned char header[kHeaderBytes];
    format_shard_header(header, static_cast<std::int32_t>(shard.tokens), layout.vocabulary, layout.version);
    try {
      write_all(fd, path, header, sizeof header, 0);
    } catch (...) {
      ::close(fd);
      throw;
    }
    const int synced = ::fsync(fd) == 0 ? 0 : errno;
    if (::close(fd) != 0 || synced != 0) fail(path, "cannot complete its header", synced ? synced : errno);
  }
}

}  // namespace tptrain::data
