#include "text/tokenizer.hpp"

#include "text/byte_tokenizer.hpp"
#include "text/gpt2_files.hpp"
#include "text/gpt2_tokenizer.hpp"
#include "text/text_error.hpp"
#include "text/tiktoken_encoding.hpp"
#include "text/tiktoken_ranks.hpp"
#include "text/tiktoken_tokenizer.hpp"

namespace tptrain::text {

std::vector<Token> Tokenizer::encode(std::string_view text) {
  std::vector<Token> out;
  encode_ordinary(text, out);
  return out;
}

const std::vector<std::string_view>& tokenizer_names() {
  static const std::vector<std::string_view> names{"bytes", "gpt2", "cl100k_base", "o200k_base"};
  return names;
}

std::optional<Token> end_of_text_of(std::string_view name) {
  if (name == "gpt2") return Token(50256);  // the last of openai/gpt-2's 50257 tokens
  if (const auto ranks = named_tiktoken_ranks(name)) return tiktoken_encoding(name, {}, {}, *ranks).end_of_text;
  if (const std::string_view path = tiktoken_file_of(name); !path.empty())
    return static_cast<Token>(count_tiktoken_ranks(std::string(path)));
  return std::nullopt;
}

Token document_start(const Tokenizer& tokenizer) { return tokenizer.end_of_text().value_or(Token('\n')); }

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name, const std::string& dir, std::string_view pattern) {
  const auto no_pattern = [&] {
    if (!pattern.empty())
      throw TextError("a pre-tokenization pattern (\"" + std::string(pattern) + "\") is given with the tokenizer \"" +
                      std::string(name) + "\": a pattern goes with \"tiktoken:PATH\" only");
  };
  if (name == "bytes") {
    no_pattern();
    return std::make_unique<ByteTokenizer>();
  }
  if (name == "gpt2") {
    no_pattern();
    const std::string folder = gpt2_dir_or_default(dir);
    if (folder.empty())
      throw TextError("no folder for GPT-2's vocabulary: neither XDG_CACHE_HOME nor HOME is set; name the folder");
    return std::make_unique<Gpt2Tokenizer>(Gpt2Vocabulary::load(folder));
  }
  if (is_tiktoken_name(name)) return std::make_unique<TiktokenTokenizer>(name, pattern, dir);
  throw TextError("unknown tokenizer \"" + std::string(name) +
                  "\": expected \"bytes\", \"gpt2\", \"cl100k_base\", \"o200k_base\" or \"tiktoken:PATH\"");
}

}  // namespace tptrain::text
