#include "text/byte_tokenizer.hpp"

#include "text/text_error.hpp"

namespace tptrain::text {

void ByteTokenizer::encode_ordinary(std::string_view text, std::vector<Token>& out) {
  out.reserve(out.size() + text.size());
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
}

std::string ByteTokenizer::decode(const std::vector<Token>& tokens) const {
  std::string out;
  out.reserve(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] > 255)
      throw TextError("token " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                      " is not a byte (the bytes tokenizer has 256 tokens)");
    out += static_cast<char>(tokens[i]);
  }
  return out;
}

}  // namespace tptrain::text
