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

Pretokenizer::Pretokenizer(SplitPattern pattern) : compiled_(std::make_unique<Compiled>()) {
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
