// tiktoken's rank files (tiktoken/load.py load_tiktoken_bpe): one token a line, "BASE64 RANK",
// the token's bytes in standard base64 (RFC 4648, with padding) and its rank, the order of its
// merge. cl100k_base.tiktoken, o200k_base.tiktoken and Llama 3's tokenizer.model are such files.
// A token's id is its rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tptrain::text {

// The most tokens a rank file may hold: ids are 32 bits (text::Token), and up to 256 special
// tokens (Llama 3's) follow the ranks.
inline constexpr std::uint64_t kMaxTiktokenRanks = (std::uint64_t{1} << 32) - 256;

// The bytes of a rank file, read whole. Throws TextError naming the file if it cannot be read.
std::string read_rank_file(const std::string& path);

// The bytes of every token, by rank, of the rank file `text` (read from `path`, named in the
// messages). A file of N tokens (non-empty lines) has the ranks 0 .. N-1, each once: every line is
// checked as it comes, and nothing is sized by a rank the file gives. Throws TextError naming the
// file (and the line) for a file that holds no tokens or more than kMaxTiktokenRanks, a line that
// is not "BASE64 RANK" (one space, a non-negative decimal rank), a rank >= N, bad base64 (a
// character outside the alphabet, a length that is not a multiple of 4, misplaced padding), a
// rank given twice or a token given two ranks (both lines), or a byte without a token of its own
// (byte-level BPE starts from one token per byte).
std::vector<std::string> parse_tiktoken_ranks(std::string_view text, const std::string& path);

// parse_tiktoken_ranks(read_rank_file(path), path).
std::vector<std::string> read_tiktoken_ranks(const std::string& path);

// The number of tokens of a rank file, its non-empty lines, without decoding them (the deck's
// checks; the file is read whole by read_tiktoken_ranks). Throws TextError if it cannot be read.
std::size_t count_tiktoken_ranks(const std::string& path);

// Standard base64 (RFC 4648 with padding), or false for anything else; exposed for tests.
bool decode_base64(std::string_view text, std::string& bytes);

}  // namespace tptrain::text
