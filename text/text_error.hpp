// Problems with text or with a tokenizer's files. The message names the file (where there is
// one), the place in it and what was expected.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace tptrain::text {

class TextError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bytes that are not UTF-8: `offset` is the byte offset of the first bad sequence in the text
// given to the call, `reason` PCRE2's description ("UTF-8 error: isolated byte with 0x80 bit set").
class InvalidUtf8 : public TextError {
 public:
  InvalidUtf8(std::size_t offset, std::string reason)
      : TextError("not valid UTF-8 at byte offset " + std::to_string(offset) + " (" + reason + ")"),
        offset_(offset),
        reason_(std::move(reason)) {}
  std::size_t offset() const { return offset_; }
  const std::string& reason() const { return reason_; }

 private:
  std::size_t offset_;
  std::string reason_;
};

}  // namespace tptrain::text
