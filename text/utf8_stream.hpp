// Text streamed token by token (`tptrain generate`): the bytes of each token in, UTF-8 out as
// soon as it is complete. A character whose bytes are split over several tokens (GPT-2's byte
// tokens, or a byte-level model) is held back until its last byte arrives. Bytes that cannot be
// UTF-8 (a stray continuation byte, a character cut short by the next one, an overlong form) come
// out as U+FFFD, the replacement character, one per byte, as a decoder with errors="replace" does;
// so the output is always valid UTF-8.
#pragma once

#include <string>
#include <string_view>

namespace tptrain::text {

class Utf8Stream {
 public:
  // The text that is complete after `bytes`; an unfinished character stays held.
  std::string push(std::string_view bytes);
  // What is still held (an unfinished character at the end of the stream), as U+FFFD; "" if nothing.
  std::string finish();
  // Bytes held back.
  std::size_t held() const { return pending_.size(); }

 private:
  std::string pending_;
};

}  // namespace tptrain::text
