// Pre-tokenization: text is cut into pieces by a regular expression, and byte-pair merges never
// cross a piece boundary. The patterns, matched by PCRE2 in UTF mode with its JIT:
//
//   gpt2    openai/gpt-2's encoder.py (tiktoken's r50k_base):
//           's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   cl100k  tiktoken's cl100k_base, which Llama 3 uses too (meta-llama/llama3 tokenizer.py):
//           (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*
//           |\s*[\r\n]+|\s+(?!\S)|\s+
//   o200k   tiktoken's o200k_base: a word is an optional non-letter, then upper-case letters and
//           lower-case letters (CamelCase splits before each capital) with an optional
//           contraction; digits in threes; punctuation runs take [\r\n/]*; then white space as
//           cl100k.
//
// These are the patterns tiktoken's core runs (@dqbd/tiktoken's encoders, the regex and
// fancy-regex crates). \s is Unicode's White_Space property here, as in those crates and in
// Python's `regex` (PCRE2's own \s under PCRE2_UCP would also take U+180E, which is not
// White_Space since Unicode 6.3); \p{L}, \p{N}, \p{M} and (?i) case folding are PCRE2's tables.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

namespace tptrain::text {

enum class SplitPattern { gpt2, cl100k, o200k };

// "gpt2", "cl100k", "o200k".
std::string_view split_pattern_name(SplitPattern p);

class Pretokenizer {
 public:
  // ascii_fast_path: o200k's pieces of ASCII text are found without PCRE2 (the same pieces,
  // faster; pretokenizer.cpp); pcre2_only: every piece by PCRE2 (the reference in the tests).
  enum class Matcher { ascii_fast_path, pcre2_only };
  // Compiles the pattern (throws TextError if PCRE2 cannot).
  explicit Pretokenizer(SplitPattern pattern = SplitPattern::gpt2, Matcher matcher = Matcher::ascii_fast_path);
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
