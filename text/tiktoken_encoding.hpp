// The tiktoken encodings: a rank file (text/tiktoken_ranks.hpp), a pre-tokenization pattern
// (text/pretokenizer.hpp) and special tokens after the ranks.
//
//   cl100k_base      OpenAI's, <ranks dir>/cl100k_base.tiktoken (100,256 ranks), the cl100k
//                    pattern; <|endoftext|> 100257, <|fim_prefix|> 100258, <|fim_middle|> 100259,
//                    <|fim_suffix|> 100260, <|endofprompt|> 100276: 100,277 ids (100256 and
//                    100261..100275 are no token).
//   o200k_base       OpenAI's, <ranks dir>/o200k_base.tiktoken (199,998 ranks), the o200k
//                    pattern; <|endoftext|> 199999, <|endofprompt|> 200018: 200,019 ids.
//   tiktoken:PATH    a rank file of N tokens and a named pattern (data.tokenizer_pattern):
//                    "llama3" (Llama 3's tokenizer.model: the cl100k pattern and Meta's 256
//                    special tokens from N on, <|begin_of_text|> N, <|end_of_text|> N + 1, ...,
//                    <|eot_id|> N + 9, <|reserved_special_token_K|>; 128,256 ids for Llama 3),
//                    or "cl100k" / "o200k" (that pattern and one special token, <|endoftext|> N).
//
// The named encodings' rank files must be OpenAI's, byte for byte (the SHA-256 that tiktoken
// checks, tiktoken_ext/openai_public.py), wherever they are read from; ranks of one's own, an
// edited copy included, go by "tiktoken:PATH".
//
// The token that separates documents (Tokenizer::end_of_text, written before each document by
// `tptrain tokenize`, where data.document_mask starts a document) is <|endoftext|>, and
// <|begin_of_text|> for "llama3", as Llama 3 starts every document with it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/pretokenizer.hpp"
#include "text/tokenizer.hpp"

namespace tptrain::text {

inline constexpr std::string_view kTiktokenFilePrefix = "tiktoken:";

struct TiktokenEncoding {
  std::string name;        // "cl100k_base", "o200k_base" or "tiktoken:PATH"
  std::string ranks_path;  // the rank file
  SplitPattern pattern = SplitPattern::cl100k;
  std::vector<std::pair<std::string, Token>> special_tokens;
  Token end_of_text = 0;
  std::size_t vocab_size = 0;  // the largest id + 1
};

// "cl100k_base", "o200k_base" or "tiktoken:..." (not checked further).
bool is_tiktoken_name(std::string_view name);
// PATH of "tiktoken:PATH"; "" for the other names.
std::string_view tiktoken_file_of(std::string_view name);
// data.tokenizer_pattern: "cl100k", "o200k" or "llama3" (the cl100k pattern), or nothing.
std::optional<SplitPattern> split_pattern_named(std::string_view pattern);
// The names split_pattern_named knows, for messages and the deck's choices.
const std::vector<std::string_view>& tiktoken_pattern_names();

// The encoding `name` whose rank file holds `ranks` tokens (the ranks of a named encoding are
// known: `ranks` is then checked against them). `dir`: the folder of the named encodings' rank
// files ("" = default_tiktoken_dir()); `pattern`: data.tokenizer_pattern, required for
// "tiktoken:PATH" and refused ("" only) for the named ones. Throws TextError naming what is
// wrong.
TiktokenEncoding tiktoken_encoding(std::string_view name, std::string_view pattern, const std::string& dir,
                                   std::size_t ranks);
// Throws the TextError of tiktoken_encoding for a missing, unknown or misplaced pattern.
void check_tiktoken_pattern(std::string_view name, std::string_view pattern);
// The rank file of `name` (see above) without reading it.
std::string tiktoken_ranks_path(std::string_view name, const std::string& dir);
// The ranks of the named encodings (100,256 and 199,998); nothing for "tiktoken:PATH".
std::optional<std::size_t> named_tiktoken_ranks(std::string_view name);

// The SHA-256 of the named encodings' rank files, OpenAI's (64 hex digits); nothing for
// "tiktoken:PATH".
std::optional<std::string_view> named_tiktoken_sha256(std::string_view name);
// For a named encoding, throws TextError unless `bytes`, the rank file read from `path` (wherever
// that is: the cache folder, data.tokenizer_dir, --tokenizer-dir), have the published SHA-256:
// the message names the file, the encoding, both digests and how to get the right file. Nothing
// for "tiktoken:PATH", whose ranks are the user's own.
void check_named_tiktoken_file(std::string_view name, const std::string& path, std::string_view bytes);

// ${XDG_CACHE_HOME:-$HOME/.cache}/tptrain/tiktoken, where jobs/fetch-tiktoken-ranks.sh puts
// cl100k_base.tiktoken and o200k_base.tiktoken; "" when neither variable is set.
std::string default_tiktoken_dir();
// How to get the named encodings' files, for messages.
std::string tiktoken_files_hint();

}  // namespace tptrain::text
