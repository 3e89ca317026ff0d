// UTF-8 validation, by PCRE2 (the library that also splits GPT-2's pre-tokens): overlong forms,
// surrogates (U+D800..U+DFFF), code points above U+10FFFF, truncated and stray bytes are all
// invalid.
#pragma once

#include <optional>
#include <string_view>

#include "text/text_error.hpp"

namespace tptrain::text {

// The first problem of `bytes` as UTF-8 (its byte offset and why), or nothing when it is valid.
std::optional<InvalidUtf8> utf8_problem(std::string_view bytes);

// Throws the InvalidUtf8 of utf8_problem(bytes), if any.
void require_utf8(std::string_view bytes);

}  // namespace tptrain::text
