#include "text/gpt2_tokenizer.hpp"

#include "text/text_error.hpp"
#include "text/utf8.hpp"

namespace tptrain::text {
namespace {
constexpr std::string_view kEndOfTextText = "<|endoftext|>";
}

Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Vocabulary vocabulary)
    : vocabulary_(std::move(vocabulary)), merges_(vocabulary_) {}

void Gpt2Tokenizer::encode_piece(std::string_view piece, std::vector<Token>& out) {
  if (piece.size() == 1) {
    out.push_back(vocabulary_.byte_token[static_cast<unsigned char>(piece[0])]);
    return;
  }
  cache_.encode(piece, out, [&](std::string_view p, std::vector<Token>& tokens) { merges_.encode(p, tokens); });
}

void Gpt2Tokenizer::encode_ordinary(std::string_view text, std::vector<Token>& out) {
  pretokenizer_.split(text, [&](std::string_view piece) { encode_piece(piece, out); });
}

std::vector<Token> Gpt2Tokenizer::encode(std::string_view text) {
  require_utf8(text);  // offsets in the message are the whole text's, not a part's
  std::vector<Token> out;
  std::size_t at = 0;
  for (std::size_t special; (special = text.find(kEndOfTextText, at)) != std::string_view::npos;
       at = special + kEndOfTextText.size()) {
    encode_ordinary(text.substr(at, special - at), out);
    out.push_back(vocabulary_.end_of_text);
  }
  encode_ordinary(text.substr(at), out);
  return out;
}

std::string Gpt2Tokenizer::decode(const std::vector<Token>& tokens) const {
  std::string out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocabulary_.token_bytes.size())
      throw TextError("token " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                      " is not in GPT-2's vocabulary (" + std::to_string(vocabulary_.token_bytes.size()) + " tokens)");
    out += vocabulary_.token_bytes[tokens[i]];
  }
  return out;
}

}  // namespace tptrain::text
