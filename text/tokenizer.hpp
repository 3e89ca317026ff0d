// What every tokenizer offers (the deck's data.tokenizer, `tptrain tokenize --tokenizer`):
// text -> token ids -> text. Implementations: "bytes" (text/byte_tokenizer.hpp) and "gpt2"
// (text/gpt2_tokenizer.hpp). Plain C++17: no MPI, no Kokkos, nothing of the model.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tptrain::text {

using Token = std::uint32_t;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::string_view name() const = 0;
  // Token ids are 0 .. vocab_size() - 1.
  virtual std::size_t vocab_size() const = 0;
  // The token that separates documents (GPT-2's <|endoftext|>), if the tokenizer has one.
  virtual std::optional<Token> end_of_text() const = 0;

  // Appends the tokens of `text` to `out`, with every byte of it as ordinary text (a literal
  // "<|endoftext|>" in a document is text, as in tiktoken's encode_ordinary). Throws
  // InvalidUtf8 (before appending anything) when the tokenizer needs UTF-8 and `text` is not.
  virtual void encode_ordinary(std::string_view text, std::vector<Token>& out) = 0;
  // The tokens of `text`, where the tokenizer's special tokens written out ("<|endoftext|>")
  // become those tokens (tiktoken's encode with allowed_special="all").
  virtual std::vector<Token> encode(std::string_view text);
  // The bytes the tokens stand for. decode(encode(x)) == x for every valid UTF-8 x. Throws
  // TextError for a token >= vocab_size().
  virtual std::string decode(const std::vector<Token>& tokens) const = 0;
};

// The tokenizer called `name` ("bytes" or "gpt2"); `gpt2_dir` is the folder of GPT-2's files
// ("" = text::default_gpt2_dir()). Throws TextError for another name or unreadable files.
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name, const std::string& gpt2_dir = {});

// The names make_tokenizer knows.
const std::vector<std::string_view>& tokenizer_names();

// The end-of-text token of the tokenizer called `name` without loading its files (documents in
// packed sequences, data.document_mask): GPT-2's <|endoftext|> 50256; none for "bytes" or an
// unknown name. Equal to make_tokenizer(name)->end_of_text() (tests/text).
std::optional<Token> end_of_text_of(std::string_view name);

}  // namespace tptrain::text
