// GPT-2's pre-tokenization: text is cut into pieces by the regular expression of openai/gpt-2's
// encoder.py, and byte-pair merges never cross a piece boundary:
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// matched by PCRE2 in UTF mode with its JIT. \s is Unicode's White_Space property here, as in
// the regex crate of tiktoken and in Python's `regex` (PCRE2's own \s under PCRE2_UCP would also
// take U+180E, which is not White_Space since Unicode 6.3); \p{L}, \p{N} are PCRE2's tables.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

namespace tptrain::text {

class Pretokenizer {
 public:
  Pretokenizer();  // compiles the pattern (throws TextError if PCRE2 cannot)
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Calls `piece` with every piece of `text`, in order; the pieces cover the text exactly.
  // Throws InvalidUtf8 (before any call) when `text` is not UTF-8. Safe to call from several
  // threads at once.
  void split(std::string_view text, const std::function<void(std::string_view)>& piece) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace tptrain::text
