// What every tokenizer offers (the deck's data.tokenizer, `tptrain tokenize --tokenizer`):
// text -> token ids -> text. Implementations: "bytes" (text/byte_tokenizer.hpp), "gpt2"
// (text/gpt2_tokenizer.hpp) and tiktoken's encodings (text/tiktoken_tokenizer.hpp). Plain C++17: no MPI, no Kokkos, nothing of the model.
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
  // Whether decode() takes `t`: every id below vocab_size() except the gaps some encodings
  // leave between their ranks and special tokens (cl100k_base has no 100256, 100261..100275).
  virtual bool has_token(Token t) const { return t < vocab_size(); }
};

// The tokenizer called `name`: "bytes", "gpt2", "cl100k_base", "o200k_base" or "tiktoken:PATH"
// (text/tiktoken_encoding.hpp). `dir` is the folder of the tokenizer's files: GPT-2's two files
// ("" = text::default_gpt2_dir()) or the named tiktoken encodings' rank files ("" =
// text::default_tiktoken_dir()). `pattern` is the pre-tokenization pattern of "tiktoken:PATH"
// ("cl100k", "o200k", "llama3"), and must be "" for the others. Throws TextError for another
// name, unreadable or malformed files, or a missing or misplaced pattern.
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name, const std::string& dir = {},
                                          std::string_view pattern = {});

// The fixed names make_tokenizer knows ("tiktoken:PATH" aside).
const std::vector<std::string_view>& tokenizer_names();

// The token that separates documents (packed sequences, data.document_mask) of the tokenizer
// called `name` without loading its files: GPT-2's <|endoftext|> 50256, cl100k_base's 100257,
// o200k_base's 199999; for "tiktoken:PATH" the first id after the ranks (the file's lines are
// counted: TextError if it cannot be read); none for "bytes" or an unknown name. Equal to
// make_tokenizer(name)->end_of_text() (tests/text).
std::optional<Token> end_of_text_of(std::string_view name);

// The token a model is given before an empty text (generate's empty prompt, a multiple-choice
// example without context): the end-of-text token, after which a document starts, or a newline
// for a tokenizer without one (bytes).
Token document_start(const Tokenizer& tokenizer);

}  // namespace tptrain::text
