#include "text/tiktoken_tokenizer.hpp"

#include "text/text_error.hpp"
#include "text/tiktoken_ranks.hpp"
#include "text/utf8.hpp"

namespace tptrain::text {

TiktokenTokenizer::TiktokenTokenizer(std::string_view name, std::string_view pattern, const std::string& dir)
    : TiktokenTokenizer(name, pattern, dir, [&] {
        check_tiktoken_pattern(name, pattern);  // before reading a file of millions of lines
        const std::string path = tiktoken_ranks_path(name, dir);
        const std::string text = read_rank_file(path);
        check_named_tiktoken_file(name, path, text);  // the bytes parsed are the bytes hashed
        return parse_tiktoken_ranks(text, path);
      }()) {}

TiktokenTokenizer::TiktokenTokenizer(std::string_view name, std::string_view pattern, const std::string& dir,
                                     const std::vector<std::string>& token_bytes)
    : encoding_(tiktoken_encoding(name, pattern, dir, token_bytes.size())),
      ranks_(token_bytes),
      pretokenizer_(encoding_.pattern) {
  for (const auto& [text, id] : encoding_.special_tokens) {
    // encode() finds special tokens as "<|" ... the next "|>".
    if (text.size() < 4 || text.compare(0, 2, "<|") != 0 || text.find("|>") != text.size() - 2)
      throw TextError("special token \"" + text + "\" is not of the form <|NAME|>");
    special_.emplace(text, id);
    special_text_.emplace(id, text);
  }
}

void TiktokenTokenizer::encode_ordinary(std::string_view text, std::vector<Token>& out) {
  pretokenizer_.split(text, [&](std::string_view piece) {
    cache_.encode(piece, out, [&](std::string_view p, std::vector<Token>& tokens) { ranks_.encode(p, tokens); });
  });
}

std::vector<Token> TiktokenTokenizer::encode(std::string_view text) {
  require_utf8(text);  // offsets in the message are the whole text's, not a part's
  std::vector<Token> out;
  std::size_t done = 0;  // text before this is encoded
  for (std::size_t open = text.find("<|"); open != std::string_view::npos; open = text.find("<|", open + 1)) {
    const std::size_t close = text.find("|>", open + 2);
    if (close == std::string_view::npos) break;
    const auto it = special_.find(std::string(text.substr(open, close + 2 - open)));
    if (it == special_.end()) continue;
    encode_ordinary(text.substr(done, open - done), out);
    out.push_back(it->second);
    done = close + 2;
    open = close + 1;  // the next search starts after the token
  }
  encode_ordinary(text.substr(done), out);
  return out;
}

std::string TiktokenTokenizer::decode(const std::vector<Token>& tokens) const {
  std::string out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const Token t = tokens[i];
    if (t < ranks_.size()) {
      out += ranks_.bytes(t);
    } else if (const auto it = special_text_.find(t); it != special_text_.end()) {
      out += it->second;
    } else {
      throw TextError("token " + std::to_string(t) + " at index " + std::to_string(i) + " is not a token of " +
                      encoding_.name + " (ranks 0.." + std::to_string(ranks_.size() - 1) + " and its special tokens)");
    }
  }
  return out;
}

}  // namespace tptrain::text
