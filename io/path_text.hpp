// Paths in messages: printable whatever the user typed. A path with a NUL byte, control
// characters or thousands of characters must still yield a message that can be read in full
// (a C string would stop at the NUL; a 5,000-character path hides the reason behind it).
#pragma once

#include <string>

namespace tptrain::io {

// `path` with control characters escaped (\0, \n, \x1b, ...) and, beyond 200 characters,
// shortened to its first and last 90 characters around "...(N characters)...".
inline std::string display_path(const std::string& path) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : path) {
    if (c == 0) out += "\\0";
    else if (c == '\n') out += "\\n";
    else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (out.size() > 200)
    out = out.substr(0, 90) + "...(" + std::to_string(path.size()) + " characters)..." + out.substr(out.size() - 90);
  return out;
}

}  // namespace tptrain::io
