// GPT-2's byte-to-unicode map (openai/gpt-2 encoder.py, bytes_to_unicode).
#include <set>
#include <string>

#include "catch.hpp"
#include "text/byte_unicode.hpp"

using namespace tptrain::text;

TEST_CASE("byte map: printable Latin-1 bytes stand for themselves, the other 68 for U+0100 on", "[text]") {
  std::set<char32_t> seen;
  char32_t next = 0x100;
  for (unsigned b = 0; b < 256; ++b) {
    const char32_t cp = byte_to_code_point(static_cast<std::uint8_t>(b));
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (printable) {
      CHECK(cp == b);
    } else {
      CHECK(cp == next);  // in byte order
      ++next;
    }
    seen.insert(cp);
    REQUIRE(code_point_to_byte(cp) == std::optional<std::uint8_t>(static_cast<std::uint8_t>(b)));
  }
  CHECK(seen.size() == 256);
  CHECK(next == 0x100 + 68);
  // The characters every GPT-2 vocabulary file shows: space, newline, tab, soft hyphen.
  CHECK(byte_to_code_point(' ') == U'\u0120');   // Ġ
  CHECK(byte_to_code_point('\n') == U'\u010A');  // Ċ
  CHECK(byte_to_code_point('\t') == U'\u0109');  // ĉ
  CHECK(byte_to_code_point(0xAD) == U'\u0143');  // Ń, the last one
}

TEST_CASE("byte map: vocabulary spellings and bytes convert both ways", "[text]") {
  std::string all;
  for (unsigned b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::string mapped = bytes_to_mapped_text(all);
  CHECK(mapped.size() == 94 + 2 * (94 + 68));  // ! .. ~ take one UTF-8 byte, Latin-1 and U+01xx two
  CHECK(mapped_text_to_bytes(mapped) == std::optional<std::string>(all));
  CHECK(bytes_to_mapped_text(" the") == "\xC4\xA0the");  // "Ġthe"
  CHECK(mapped_text_to_bytes("\xC4\xA0the\xC4\x8A") == std::optional<std::string>(" the\n"));
}

TEST_CASE("byte map: text outside the alphabet stands for no bytes", "[text]") {
  CHECK_FALSE(mapped_text_to_bytes(" "));             // the space itself is spelled Ġ
  CHECK_FALSE(mapped_text_to_bytes("\xC2\xAD"));      // U+00AD is not printable: spelled Ń
  CHECK_FALSE(mapped_text_to_bytes("\xC5\xB8"));      // U+0178, beyond the 68 extra characters
  CHECK_FALSE(mapped_text_to_bytes("\xE2\x82\xAC"));  // €, three UTF-8 bytes
  CHECK_FALSE(mapped_text_to_bytes("\xC0\xA1"));      // an overlong '!'
  CHECK_FALSE(mapped_text_to_bytes("a\x80"));         // a stray continuation byte
  CHECK_FALSE(mapped_text_to_bytes("\xC4"));          // truncated
  CHECK(mapped_text_to_bytes("") == std::optional<std::string>(""));
}
