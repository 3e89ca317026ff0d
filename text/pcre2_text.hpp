// What the PCRE2-based files share: the 8-bit library, and its error codes as words.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

namespace tptrain::text {

// PCRE2's message for an error code (compile, match or UTF-check error).
inline std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof buffer);
  return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<const char*>(buffer));
}

// The UTF-8 check errors of pcre2_match (PCRE2_ERROR_UTF8_ERR1..21 are -3..-23).
inline bool is_utf8_error(int code) {
  return code <= PCRE2_ERROR_UTF8_ERR1 && code >= PCRE2_ERROR_UTF8_ERR21;
}

}  // namespace tptrain::text
