#include "text/pretokenizer.hpp"

#include "text/pcre2_text.hpp"
#include "text/text_error.hpp"

namespace tptrain::text {
namespace {

// The patterns of the header, with \s spelled as White_Space and \S as its complement.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
    R"(|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";
constexpr std::string_view kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\p{White_Space}\p{L}\p{N}]+[\r\n]*)"
    R"(|\p{White_Space}*[\r\n]+|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";
constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\p{White_Space}\p{L}\p{N}]+[\r\n/]*)"
    R"(|\p{White_Space}*[\r\n]+|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";

// ---- o200k on ASCII, without PCRE2 ------------------------------------------------------------
// Most text is ASCII, and o200k's pattern is the slowest of the three for PCRE2 (its word
// alternatives try five Unicode classes per letter). On ASCII bytes the classes are simple --
// \p{Lu} is A-Z, \p{Ll} a-z, \p{N} 0-9, White_Space \t\n\v\f\r and space, \p{Lt}, \p{Lm},
// \p{Lo} and \p{M} empty -- and the alternatives' backtracking reduces to the cases below. The
// matcher returns the end of the piece PCRE2 would match at `p`, or 0 whenever a byte >= 0x80
// could change that answer (a letter or mark continuing a word, a non-ASCII digit, symbol or
// space, a character folding to a contraction's letter): PCRE2 then matches that piece.
// tests/text/test_pretokenizer.cpp holds the two equal on random mixed text.
bool is_upper(int b) { return b >= 'A' && b <= 'Z'; }
bool is_lower(int b) { return b >= 'a' && b <= 'z'; }
bool is_letter(int b) { return is_upper(b) || is_lower(b); }
bool is_digit(int b) { return b >= '0' && b <= '9'; }
bool is_space(int b) { return b == ' ' || (b >= '\t' && b <= '\r'); }
bool is_high(int b) { return b >= 0x80; }
bool is_other(int b) { return b >= 0 && !is_high(b) && !is_space(b) && !is_letter(b) && !is_digit(b); }

std::size_t o200k_ascii_piece(std::string_view t, std::size_t p) {
  const auto at = [&](std::size_t i) { return i < t.size() ? static_cast<int>(static_cast<unsigned char>(t[i])) : -1; };
  const int c = at(p);
  if (is_high(c)) return 0;
  // [^\r\n\p{L}\p{N}]?[upper]*[lower]+'x? | [^\r\n\p{L}\p{N}]?[upper]+[lower]*'x?: a non-letter
  // prefix is taken whenever it can be (without it the letters would have to start at it).
  const bool prefix = c != '\r' && c != '\n' && !is_letter(c) && !is_digit(c);
  if (prefix || is_letter(c)) {
    const std::size_t q = prefix ? p + 1 : p;
    std::size_t u = q;
    while (is_upper(at(u))) ++u;
    std::size_t l = u;
    while (is_lower(at(l))) ++l;
    if (is_high(at(l))) return 0;
    if (l > q) {  // upper then lower (the first form), or upper alone (the second)
      if (at(l) != '\'') return l;
      const int x = at(l + 1) | 0x20, y = at(l + 2) | 0x20;
      if (is_high(at(l + 1))) return 0;
      if (x == 's' || x == 't' || x == 'm' || x == 'd') return l + 2;
      if (x == 'r' || x == 'v' || x == 'l') {
        if (is_high(at(l + 2))) return 0;
        if (y == (x == 'l' ? 'l' : 'e')) return l + 3;
      }
      return l;
    }
  }
  if (is_digit(c)) {  // \p{N}{1,3}
    std::size_t e = p;
    while (e < p + 3 && is_digit(at(e))) ++e;
    return e < p + 3 && is_high(at(e)) ? 0 : e;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
  if (c == ' ' && is_high(at(p + 1))) return 0;
  const std::size_t s = c == ' ' && is_other(at(p + 1)) ? p + 1 : p;
  if (is_other(at(s))) {
    std::size_t e = s;
    while (is_other(at(e))) ++e;
    if (is_high(at(e))) return 0;
    while (at(e) == '\r' || at(e) == '\n' || at(e) == '/') ++e;
    return e;
  }
  // White space: \s*[\r\n]+ ends after the run's last line break; else \s+(?!\S) leaves the
  // last space to the next piece, unless the run ends the text or is one character (\s+).
  std::size_t r = p;
  std::size_t last_break = t.size();
  for (; is_space(at(r)); ++r)
    if (at(r) == '\r' || at(r) == '\n') last_break = r;
  if (is_high(at(r))) return 0;
  if (last_break < t.size()) return last_break + 1;
  if (r == t.size() || r - p == 1) return r;
  return r - 1;
}

std::string_view pattern_text(SplitPattern p) {
  switch (p) {
    case SplitPattern::cl100k: return kCl100kPattern;
    case SplitPattern::o200k: return kO200kPattern;
    case SplitPattern::gpt2: break;
  }
  return kGpt2Pattern;
}

}  // namespace

struct Pretokenizer::Compiled {
  pcre2_code* code = nullptr;
  std::size_t (*ascii_piece)(std::string_view, std::size_t) = nullptr;  // none: PCRE2 alone
  ~Compiled() { pcre2_code_free(code); }
};

std::string_view split_pattern_name(SplitPattern p) {
  switch (p) {
    case SplitPattern::cl100k: return "cl100k";
    case SplitPattern::o200k: return "o200k";
    case SplitPattern::gpt2: break;
  }
  return "gpt2";
}

Pretokenizer::Pretokenizer(SplitPattern pattern, Matcher matcher) : compiled_(std::make_unique<Compiled>()) {
  if (pattern == SplitPattern::o200k && matcher == Matcher::ascii_fast_path) compiled_->ascii_piece = o200k_ascii_piece;
  int error = 0;
  PCRE2_SIZE offset = 0;
  const std::string_view text = pattern_text(pattern);
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), PCRE2_UTF | PCRE2_UCP,
                                  &error, &offset, nullptr);
  if (!compiled_->code)
    throw TextError("cannot compile the " + std::string(split_pattern_name(pattern)) +
                    " pre-tokenization pattern at offset " + std::to_string(offset) + ": " + pcre2_message(error));
  // Without JIT support (a PCRE2 built without it) matching still works, only slower.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

Pretokenizer::~Pretokenizer() = default;

void Pretokenizer::split(std::string_view text, const std::function<void(std::string_view)>& piece) const {
  if (text.empty()) return;
  const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), pcre2_match_data_free);
  if (!match) throw TextError("out of memory for PCRE2 match data");
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
  std::size_t at = 0;
  // The first match checks the whole text as UTF-8 (offset 0); later ones skip the check, which
  // PCRE2 would otherwise repeat from the offset to the end on every call.
  std::uint32_t options = 0;
  while (at < text.size()) {
    if (options != 0 && compiled_->ascii_piece != nullptr)
      if (const std::size_t end = compiled_->ascii_piece(text, at); end > at) {
        piece(text.substr(at, end - at));
        at = end;
        continue;
      }
    const int rc = pcre2_match(compiled_->code, subject, text.size(), at, options, match.get(), nullptr);
    if (is_utf8_error(rc)) throw InvalidUtf8(pcre2_get_startchar(match.get()), pcre2_message(rc));
    if (rc < 0)
      throw TextError("pre-tokenization failed at byte offset " + std::to_string(at) + ": " + pcre2_message(rc));
    // Every character is a letter, a number, white space or something else, so a piece starts
    // wherever the previous one ended; anything else would drop text.
    if (ovector[0] != at || ovector[1] <= at)
      throw TextError("pre-tokenization skipped text at byte offset " + std::to_string(at));
    piece(text.substr(at, ovector[1] - at));
    at = ovector[1];
    options = PCRE2_NO_UTF_CHECK;
  }
}

}  // namespace tptrain::text
