// tiktoken's rank files (tiktoken/load.py load_tiktoken_bpe): one token a line, "BASE64 RANK",
// the token's bytes in standard base64 (RFC 4648, with padding) and its rank, the order of its
// merge. cl100k_base.tiktoken, o200k_base.tiktoken and Llama 3's tokenizer.model are such files.
// A token's id is its rank.
#pragma once

#include <string>
#include <vector>

namespace tptrain::text {

// The bytes of every token, by rank. Throws TextError naming the file (and the line) for a file
// that cannot be read or holds no tokens, a line that is not "BASE64 RANK" (one space, a
// non-negative decimal rank), bad base64 (a character outside the alphabet, a length that is not
// a multiple of 4, misplaced padding), a rank given twice or a token given two ranks (both
// lines), ranks that are not 0 .. N-1 (the first missing one), or a byte without a token of its
// own (byte-level BPE starts from one token per byte).
std::vector<std::string> read_tiktoken_ranks(const std::string& path);

// The number of tokens of a rank file, its non-empty lines, without decoding them (the deck's
// checks; the file is read whole by read_tiktoken_ranks). Throws TextError if it cannot be read.
std::size_t count_tiktoken_ranks(const std::string& path);

// Standard base64 (RFC 4648 with padding), or false for anything else; exposed for tests.
bool decode_base64(std::string_view text, std::string& bytes);

}  // namespace tptrain::text
