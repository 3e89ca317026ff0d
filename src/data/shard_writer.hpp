// The output of `tptrain tokenize`: one stream of tokens cut into llm.c shards
// (src/data/token_dataset.hpp has the format). The first `valid_tokens` tokens of the stream go
// to valid_000000.bin, valid_000001.bin, ..., the rest to train_000000.bin, ...; every shard
// holds `shard_tokens` tokens but the last of each kind. Token t of the stream therefore has one
// place, whoever writes it: ranks write their own ranges of the stream into the same files
// (pwrite at disjoint offsets) and the files equal those a single writer makes. Plain C++17 and
// POSIX: no MPI.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/data/shard_header.hpp"

namespace tptrain::data {

struct ShardLayout {
  std::uint64_t valid_tokens = 0;  // 0: no validation shards
  std::uint64_t shard_tokens = 0;  // at most kMaxShardTokens
  ShardVocabulary vocabulary;      // recorded in every header (shard_header.hpp)
  std::int32_t version = kShardVersionU16;  // 1: uint16 tokens, 2: uint32 (shard_version_for)
};

// The llm.c header stores the token count as an int32.
inline constexpr std::uint64_t kMaxShardTokens = 2147483647;

struct ShardFile {
  std::string name;  // "train_000000.bin"
  std::uint64_t tokens = 0;
};

// The shards of a stream of `total` tokens, valid first, in order.
std::vector<ShardFile> shard_files(const ShardLayout& layout, std::uint64_t total);

// Writes token ranges into the shard files of `dir` (created as needed; the header is left as
// zeros for write_shard_headers). Not thread-safe; one writer per process.
class ShardWriter {
 public:
  ShardWriter(std::string dir, ShardLayout layout);
  ~ShardWriter();  // closes what is still open, silently
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Writes stream tokens [first, first + n) (little-endian, uint16 or uint32 as the layout's
  // version says). Throws DataError naming the file for a failed open or write (a full disk: "No
  // space left on device").
  void write(std::uint64_t first, const std::uint32_t* tokens, std::size_t n);
  // Closes every file; throws DataError for a failed close (data that never reached the disk).
  void close();

 private:
  int file(const std::string& name);

  std::string dir_;
  ShardLayout layout_;
  std::map<std::string, int> open_;  // name -> descriptor
};

// Writes the llm.c header (magic, the layout's version, token count, its vocabulary) of every
// shard of `total` tokens in `dir`, once all tokens are written. Throws DataError naming the file.
void write_shard_headers(const std::string& dir, const ShardLayout& layout, std::uint64_t total);

}  // namespace tptrain::data
