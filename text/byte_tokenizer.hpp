// Bytes as tokens: byte b is token b (vocabulary 256), the tokenization of byte-level .txt data.
// Any bytes are accepted (no UTF-8 needed) and there is no end-of-text token.
#pragma once

#include "text/tokenizer.hpp"

namespace tptrain::text {

class ByteTokenizer final : public Tokenizer {
 public:
  std::string_view name() const override { return "bytes"; }
  std::size_t vocab_size() const override { return 256; }
  std::optional<Token> end_of_text() const override { return std::nullopt; }
  void encode_ordinary(std::string_view text, std::vector<Token>& out) override;
  std::string decode(const std::vector<Token>& tokens) const override;
};

}  // namespace tptrain::text
