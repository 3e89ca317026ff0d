// A tiktoken encoding (text/tiktoken_encoding.hpp): UTF-8 text is cut into pre-tokens by the
// encoding's pattern (text/pretokenizer.hpp), each is merged by rank (text/rank_encoder.hpp),
// and special tokens written out become their ids in encode(). Decoding concatenates the
// tokens' bytes. Equal token for token to tiktoken's core (@dqbd/tiktoken; tests/text/).
#pragma once

#include <string>
#include <unordered_map>

#include "text/piece_cache.hpp"
#include "text/pretokenizer.hpp"
#include "text/rank_encoder.hpp"
#include "text/tiktoken_encoding.hpp"
#include "text/tokenizer.hpp"

namespace tptrain::text {

class TiktokenTokenizer final : public Tokenizer {
 public:
  // Reads the encoding's rank file, which must be OpenAI's for a named encoding. Throws TextError
  // naming the file and the problem.
  TiktokenTokenizer(std::string_view name, std::string_view pattern, const std::string& dir);

  std::string_view name() const override { return encoding_.name; }
  std::size_t vocab_size() const override { return encoding_.vocab_size; }
  std::optional<Token> end_of_text() const override { return encoding_.end_of_text; }
  // Not thread-safe: the cache of merged pre-tokens is this object's (one tokenizer per thread).
  void encode_ordinary(std::string_view text, std::vector<Token>& out) override;
  std::vector<Token> encode(std::string_view text) override;
  std::string decode(const std::vector<Token>& tokens) const override;
  bool has_token(Token t) const override { return t < ranks_.size() || special_text_.count(t) != 0; }

  const TiktokenEncoding& encoding() const { return encoding_; }

 private:
  TiktokenTokenizer(std::string_view name, std::string_view pattern, const std::string& dir,
                    const std::vector<std::string>& token_bytes);

  TiktokenEncoding encoding_;
  RankEncoder ranks_;
  Pretokenizer pretokenizer_;
  std::unordered_map<std::string, Token> special_;  // "<|endoftext|>" -> its id
  std::unordered_map<Token, std::string> special_text_;
  PieceCache cache_;
};

}  // namespace tptrain::text
