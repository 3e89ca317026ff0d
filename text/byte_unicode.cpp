#include "text/byte_unicode.hpp"

#include <array>

namespace tptrain::text {
namespace {

bool stands_for_itself(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteMap {
  std::array<char32_t, 256> to_code_point{};
  std::array<int, 512> to_byte{};  // every mapped code point is below 256 + 68
};

const ByteMap& byte_map() {
  static const ByteMap map = [] {
    ByteMap m;
    m.to_byte.fill(-1);
    char32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const char32_t cp = stands_for_itself(b) ? static_cast<char32_t>(b) : next++;
      m.to_code_point[b] = cp;
      m.to_byte[cp] = static_cast<int>(b);
    }
    return m;
  }();
  return map;
}

void append_utf8(char32_t cp, std::string& out) {  // code points below 0x800 only
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

char32_t byte_to_code_point(std::uint8_t b) { return byte_map().to_code_point[b]; }

std::optional<std::uint8_t> code_point_to_byte(char32_t cp) {
  if (cp >= byte_map().to_byte.size()) return std::nullopt;
  const int b = byte_map().to_byte[cp];
  if (b < 0) return std::nullopt;
  return static_cast<std::uint8_t>(b);
}

std::optional<std::string> mapped_text_to_bytes(std::string_view utf8) {
  // Mapped characters are U+0021..U+0143: one or two UTF-8 bytes. Anything else (a longer
  // sequence, a stray continuation byte) stands for no byte.
  std::string out;
  out.reserve(utf8.size());
  for (std::size_t i = 0; i < utf8.size();) {
    const auto c0 = static_cast<unsigned char>(utf8[i]);
    char32_t cp = 0;
    if (c0 < 0x80) {
      cp = c0;
      i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < utf8.size() &&
               (static_cast<unsigned char>(utf8[i + 1]) & 0xC0) == 0x80) {
      cp = (static_cast<char32_t>(c0 & 0x1F) << 6) | (static_cast<unsigned char>(utf8[i + 1]) & 0x3F);
      if (cp < 0x80) return std::nullopt;  // overlong
      i += 2;
    } else {
      return std::nullopt;
    }
    const auto b = code_point_to_byte(cp);
    if (!b) return std::nullopt;
    out += static_cast<char>(*b);
  }
  return out;
}

std::string bytes_to_mapped_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(byte_to_code_point(static_cast<std::uint8_t>(c)), out);
  return out;
}

}  // namespace tptrain::text
