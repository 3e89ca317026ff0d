// Pre-tokens whose tokens are remembered: natural text repeats its words, so most pre-tokens are
// found here instead of being merged again (the GPT-2 and the tiktoken tokenizers). Not
// thread-safe: one cache, like one tokenizer, per thread.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/tokenizer.hpp"

namespace tptrain::text {

class PieceCache {
 public:
  // The cache is emptied when it reaches this size.
  static constexpr std::size_t kEntries = std::size_t{1} << 18;

  // Appends the tokens of `piece` to `out`: the remembered ones, or merge(piece, tokens)'s,
  // which are remembered.
  template <class Merge>
  void encode(std::string_view piece, std::vector<Token>& out, const Merge& merge) {
    std::string key(piece);
    if (const auto it = cache_.find(key); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
    std::vector<Token> tokens;
    merge(piece, tokens);
    out.insert(out.end(), tokens.begin(), tokens.end());
    if (cache_.size() >= kEntries) cache_.clear();
    cache_.emplace(std::move(key), std::move(tokens));
  }

 private:
  std::unordered_map<std::string, std::vector<Token>> cache_;
};

}  // namespace tptrain::text
