#include "src/data/shard_header.hpp"

#include <fmt/format.h>

#include <cstring>
#include <limits>

#include "io/path_text.hpp"

namespace tptrain::data {
namespace {

struct Tokenizer {
  std::int32_t id;
  std::string_view name;
};
// "tiktoken:PATH" records 5 whatever the file (the vocabulary size tells files apart).
constexpr Tokenizer kTokenizers[] = {{1, "bytes"}, {2, "gpt2"}, {3, "cl100k_base"}, {4, "o200k_base"}, {5, "tiktoken:"}};

std::string_view header_name(std::string_view tokenizer_name) {
  constexpr std::string_view file = "tiktoken:";
  return tokenizer_name.substr(0, file.size()) == file ? file : tokenizer_name;
}

// Little-endian loads and stores, independent of the host byte order.
std::int32_t load_le32(const unsigned char* p) {
  const std::uint32_t u = static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                          static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
  std::int32_t v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

void store_le32(unsigned char* p, std::int32_t v) {
  const auto u = static_cast<std::uint32_t>(v);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(u >> (8 * i));
}

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw DataError("data file '" + io::display_path(path) + "': " + problem);
}

}  // namespace

ShardVocabulary shard_vocabulary(std::string_view tokenizer_name, std::size_t vocab_size) {
  if (vocab_size == 0 || vocab_size > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw DataError(fmt::format("a shard header records vocabulary sizes 1 .. 2^31 - 1, not {}", vocab_size));
  for (const Tokenizer& t : kTokenizers)
    if (t.name == header_name(tokenizer_name)) return {static_cast<std::int32_t>(vocab_size), t.id};
  throw DataError(fmt::format("tokenizer '{}' has no id for shard headers (src/data/shard_header.cpp)", tokenizer_name));
}

std::string describe_version(std::int32_t version) {
  return fmt::format("version {} ({} tokens)", version, version == kShardVersionU32 ? "uint32" : "uint16");
}

std::string describe(const ShardVocabulary& v) {
  if (!v.recorded()) return "not recorded";
  for (const Tokenizer& t : kTokenizers)
    if (t.id == v.tokenizer) return fmt::format("{}, {} tokens", t.name == "tiktoken:" ? "a tiktoken rank file" : t.name, v.size);
  return fmt::format("tokenizer id {}, {} tokens", v.tokenizer, v.size);
}

ShardHeader parse_shard_header(const unsigned char* header, std::uint64_t file_bytes, const std::string& path) {
  const std::int32_t magic = load_le32(header);
  std::int32_t version = load_le32(header + 4);
  if (magic == kLlmcLlama3Magic) {
    if (version != kLlmcLlama3Version)
      fail(path, fmt::format("magic number {} (llm.c's Llama 3 shards) with version {}: expected version {}",
                             magic, version, kLlmcLlama3Version));
    version = kShardVersionU32;  // the same uint32 payload
  } else if (magic != kShardMagic) {
    fail(path, fmt::format("bad magic number {}, expected {} (an llm.c token shard; {} with version {}: llm.c's "
                           "Llama 3 shards)",
                           magic, kShardMagic, kLlmcLlama3Magic, kLlmcLlama3Version));
  }
  if (version != kShardVersionU16 && version != kShardVersionU32)
    fail(path, fmt::format("unsupported shard version {}, expected {} (uint16 tokens) or {} (uint32 tokens)", version,
                           kShardVersionU16, kShardVersionU32));
  const std::int32_t count = load_le32(header + 8);
  if (count < 0) fail(path, fmt::format("negative token count {} in the header", count));
  if (count == 0) fail(path, "the shard holds no tokens (header token count is 0)");
  const std::uint64_t width = static_cast<std::uint64_t>(shard_token_bytes(version));
  const std::uint64_t expected = kShardHeaderBytes + width * static_cast<std::uint64_t>(count);
  if (file_bytes != expected)
    fail(path, fmt::format("file is {} its header claims{}: header says {} tokens of {} bytes ({}) = {} bytes, file "
                           "has {} bytes",
                           file_bytes < expected ? "shorter than" : "longer than",
                           file_bytes < expected ? " (truncated)" : "", count, width, describe_version(version),
                           expected, file_bytes));
  ShardHeader h;
  h.tokens = static_cast<std::uint64_t>(count);
  h.version = version;
  h.vocabulary.size = load_le32(header + 4 * kShardVocabSizeInt);
  h.vocabulary.tokenizer = load_le32(header + 4 * kShardTokenizerInt);
  if (h.vocabulary.size < 0 || (h.vocabulary.recorded() && h.vocabulary.size == 0))
    fail(path, fmt::format("header[{}] records vocabulary size {}, expected a positive size (or 0 with header[{}] = 0: "
                           "not recorded)",
                           kShardVocabSizeInt, h.vocabulary.size, kShardTokenizerInt));
  if (version == kShardVersionU16 && h.vocabulary.size > 65536)
    fail(path, fmt::format("header records the vocabulary {} in {}, which holds ids up to 65535 only (a larger "
                           "vocabulary needs version {}, uint32 tokens)",
                           describe(h.vocabulary), describe_version(version), kShardVersionU32));
  return h;
}

void format_shard_header(unsigned char* header, std::int32_t tokens, const ShardVocabulary& v, std::int32_t version) {
  std::memset(header, 0, kShardHeaderBytes);
  store_le32(header, kShardMagic);
  store_le32(header + 4, version);
  store_le32(header + 8, tokens);
  store_le32(header + 4 * kShardVocabSizeInt, v.size);
  store_le32(header + 4 * kShardTokenizerInt, v.tokenizer);
}

}  // namespace tptrain::data
