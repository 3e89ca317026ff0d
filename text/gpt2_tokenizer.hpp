// GPT-2's byte-level BPE (Radford et al. 2019; openai/gpt-2 encoder.py): UTF-8 text is cut into
// pre-tokens (text/pretokenizer.hpp), the bytes of each are merged by rank
// (text/byte_pair_encoder.hpp), and <|endoftext|> is token 50256. Decoding concatenates the
// tokens' bytes. Equal token for token to tiktoken's "gpt2" encoding (tests/text/).
#pragma once

#include <string>

#include "text/byte_pair_encoder.hpp"
#include "text/gpt2_vocabulary.hpp"
#include "text/piece_cache.hpp"
#include "text/pretokenizer.hpp"
#include "text/tokenizer.hpp"

namespace tptrain::text {

class Gpt2Tokenizer final : public Tokenizer {
 public:
  explicit Gpt2Tokenizer(Gpt2Vocabulary vocabulary);

  std::string_view name() const override { return "gpt2"; }
  std::size_t vocab_size() const override { return vocabulary_.token_bytes.size(); }
  std::optional<Token> end_of_text() const override { return vocabulary_.end_of_text; }
  // Not thread-safe: the cache of merged pre-tokens is this object's (one tokenizer per thread).
  void encode_ordinary(std::string_view text, std::vector<Token>& out) override;
  std::vector<Token> encode(std::string_view text) override;
  std::string decode(const std::vector<Token>& tokens) const override;

 private:
  void encode_piece(std::string_view piece, std::vector<Token>& out);

  Gpt2Vocabulary vocabulary_;
  Pretokenizer pretokenizer_;
  BytePairEncoder merges_;
  PieceCache cache_;
};

}  // namespace tptrain::text
