#include "text/tokenizer.hpp"

#include "text/byte_tokenizer.hpp"
#include "text/gpt2_files.hpp"
#include "text/gpt2_tokenizer.hpp"
#include "text/text_error.hpp"

namespace tptrain::text {

std::vector<Token> Tokenizer::encode(std::string_view text) {
  std::vector<Token> out;
  encode_ordinary(text, out);
  return out;
}

const std::vector<std::string_view>& tokenizer_names() {
  static const std::vector<std::string_view> names{"bytes", "gpt2"};
  return names;
}

std::optional<Token> end_of_text_of(std::string_view name) {
  if (name == "gpt2") return Token(50256);  // the last of openai/gpt-2's 50257 tokens
  return std::nullopt;
}

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name, const std::string& gpt2_dir) {
  if (name == "bytes") return std::make_unique<ByteTokenizer>();
  if (name == "gpt2") {
    const std::string dir = gpt2_dir_or_default(gpt2_dir);
    if (dir.empty())
      throw TextError("no folder for GPT-2's vocabulary: neither XDG_CACHE_HOME nor HOME is set; name the folder");
    return std::make_unique<Gpt2Tokenizer>(Gpt2Vocabulary::load(dir));
  }
  throw TextError("unknown tokenizer \"" + std::string(name) + "\": expected \"bytes\" or \"gpt2\"");
}

}  // namespace tptrain::text
