// GPT-2's vocabulary as read from its two files (text/gpt2_files.hpp): the bytes of every token,
// the one-byte tokens, the merges in rank order and the end-of-text token.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tptrain::text {

// Merge of rank r (its index in Gpt2Vocabulary::merges): the adjacent tokens `left` `right`
// become `merged`.
struct Merge {
  std::uint32_t left = 0;
  std::uint32_t right = 0;
  std::uint32_t merged = 0;
};

struct Gpt2Vocabulary {
  std::vector<std::string> token_bytes;        // token id -> the bytes it stands for
  std::array<std::uint32_t, 256> byte_token{};  // byte -> the token of that byte alone
  std::vector<Merge> merges;                    // rank order
  std::uint32_t end_of_text = 0;                // the token "<|endoftext|>" (50256 in GPT-2)

  // Reads `dir`/encoder.json and `dir`/vocab.bpe. Throws TextError naming the file (and the line
  // of vocab.bpe) for a file that cannot be read, JSON that is not an object of token ids 0..N-1,
  // an entry that is not in the byte-to-unicode alphabet, a byte without its token, a missing
  // "<|endoftext|>", a merge line that is not two known tokens whose concatenation is a token,
  // or a pair merged twice.
  static Gpt2Vocabulary load(const std::string& dir);
};

}  // namespace tptrain::text
