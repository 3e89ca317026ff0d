// The header of an llm.c token shard: 256 little-endian int32, then the tokens.
//   header[0]  magic 20240520
//   header[1]  version: 1 = little-endian uint16 tokens (llm.c's), 2 = little-endian uint32
//              tokens (vocabularies of more than 65536 ids: cl100k, o200k, Llama 3)
//   header[2]  token count
//   header[3]  tptrain: the vocabulary size the tokens were made with (50257 for GPT-2)
//   header[4]  tptrain: the tokenizer, 1 = "bytes", 2 = "gpt2", 3 = "cl100k_base",
//              4 = "o200k_base", 5 = "tiktoken:PATH" (any rank file)
// llm.c writes header[3..255] as zeros and never reads them, so a shard written here is still an
// llm.c shard, and an llm.c shard reads here as "vocabulary not recorded". Ids are never reused:
// a new tokenizer gets the next number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "src/data/data_error.hpp"

namespace tptrain::data {

inline constexpr std::int32_t kShardMagic = 20240520;
// llm.c's own shards of Llama 3 tokens (dev/data/data_common.py): magic 20240801, version 7,
// uint32 tokens. Read as version 2 (the same payload); never written.
inline constexpr std::int32_t kLlmcLlama3Magic = 20240801;
inline constexpr std::int32_t kLlmcLlama3Version = 7;
inline constexpr std::int32_t kShardVersionU16 = 1;
inline constexpr std::int32_t kShardVersionU32 = 2;
inline constexpr std::size_t kShardHeaderInts = 256;  // header size in int32 (1024 bytes)
inline constexpr std::size_t kShardHeaderBytes = kShardHeaderInts * sizeof(std::int32_t);
inline constexpr std::size_t kShardVocabSizeInt = 3;  // header index of the vocabulary size
inline constexpr std::size_t kShardTokenizerInt = 4;  // header index of the tokenizer id

// What a shard's tokens mean. Both fields 0: not recorded (an llm.c shard).
struct ShardVocabulary {
  std::int32_t size = 0;
  std::int32_t tokenizer = 0;
  bool recorded() const { return size != 0 || tokenizer != 0; }
  bool operator==(const ShardVocabulary& o) const { return size == o.size && tokenizer == o.tokenizer; }
  bool operator!=(const ShardVocabulary& o) const { return !(*this == o); }
};

// The version that holds the ids of a `vocab_size` vocabulary: 1 (uint16, llm.c-compatible)
// while the ids fit, i.e. vocab_size <= 65536; 2 (uint32) above.
inline std::int32_t shard_version_for(std::size_t vocab_size) {
  return vocab_size <= 65536 ? kShardVersionU16 : kShardVersionU32;
}
// Bytes per token of a version (1: 2, 2: 4).
inline int shard_token_bytes(std::int32_t version) { return version == kShardVersionU32 ? 4 : 2; }
// "version 1 (uint16 tokens)".
std::string describe_version(std::int32_t version);

// The vocabulary of tokenizer `name` ("bytes", "gpt2", "cl100k_base", "tiktoken:PATH", ...) with `vocab_size` token ids. Throws
// DataError for a tokenizer without an id (give it the next one above) or a size past int32.
ShardVocabulary shard_vocabulary(std::string_view tokenizer_name, std::size_t vocab_size);

// "gpt2, 50257 tokens", "tokenizer id 7, 1000 tokens", "not recorded".
std::string describe(const ShardVocabulary& v);

struct ShardHeader {
  std::uint64_t tokens = 0;
  std::int32_t version = kShardVersionU16;
  ShardVocabulary vocabulary;
  int token_bytes() const { return shard_token_bytes(version); }
};

// Checks the kShardHeaderBytes at `header` of a file of `file_bytes` bytes: magic, version (1 or
// 2; llm.c's Llama 3 header, magic 20240801 version 7, reads as version 2), a positive token
// count, and a file size of exactly header + token_bytes * count bytes (a truncated or overlong
// file is refused with both sizes); a version-1 header recording a vocabulary of more than 65536
// ids, which uint16 cannot hold, is refused too. Throws DataError starting "data file 'PATH': ".
ShardHeader parse_shard_header(const unsigned char* header, std::uint64_t file_bytes, const std::string& path);

// Writes a header of `tokens` tokens of vocabulary `v` in shard version `version` into the
// kShardHeaderBytes at `header`.
void format_shard_header(unsigned char* header, std::int32_t tokens, const ShardVocabulary& v,
                         std::int32_t version = kShardVersionU16);

}  // namespace tptrain::data
