// GPT-2's byte-to-unicode map (bytes_to_unicode() of openai/gpt-2's encoder.py): every byte
// stands for one printable character, so that the vocabulary files can be text. The 188 bytes
// that are printable Latin-1 (! .. ~, ¡ .. ¬, ® .. ÿ) stand for themselves; the other 68
// (controls, space, DEL, NBSP, soft hyphen) stand for U+0100, U+0101, ... in byte order: the
// space 0x20 is "Ġ" (U+0120), the newline 0x0A is "Ċ" (U+010A).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tptrain::text {

// The code point that stands for byte b.
char32_t byte_to_code_point(std::uint8_t b);
// The byte that code point cp stands for, or nothing when cp stands for no byte.
std::optional<std::uint8_t> code_point_to_byte(char32_t cp);

// The bytes that a vocabulary entry (UTF-8 text of mapped characters, as in encoder.json and
// vocab.bpe) stands for, or nothing when some character of it stands for no byte.
std::optional<std::string> mapped_text_to_bytes(std::string_view utf8);
// The vocabulary spelling of `bytes`: each byte as its mapped character, in UTF-8.
std::string bytes_to_mapped_text(std::string_view bytes);

}  // namespace tptrain::text
