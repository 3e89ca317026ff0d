#include "text/utf8.hpp"

#include <memory>

#include "text/pcre2_text.hpp"

namespace tptrain::text {
namespace {

// An empty pattern in UTF mode: matching it at offset 0 makes PCRE2 check the whole subject
// first (pcre2api, "UTF-8 validity checking") and stop at the first invalid sequence.
const pcre2_code* empty_utf_pattern() {
  static const std::unique_ptr<pcre2_code, void (*)(pcre2_code*)> code = [] {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(""), 0, PCRE2_UTF, &error, &offset, nullptr);
    if (!c) throw TextError("cannot compile the UTF-8 check: " + pcre2_message(error));
    return std::unique_ptr<pcre2_code, void (*)(pcre2_code*)>(c, pcre2_code_free);
  }();
  return code.get();
}

}  // namespace

std::optional<InvalidUtf8> utf8_problem(std::string_view bytes) {
  const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
      pcre2_match_data_create(1, nullptr), pcre2_match_data_free);
  if (!match) throw TextError("out of memory for PCRE2 match data");
  const int rc = pcre2_match(empty_utf_pattern(), reinterpret_cast<PCRE2_SPTR>(bytes.data()), bytes.size(), 0, 0,
                             match.get(), nullptr);
  if (is_utf8_error(rc)) return InvalidUtf8(pcre2_get_startchar(match.get()), pcre2_message(rc));
  if (rc < 0) throw TextError("UTF-8 check failed: " + pcre2_message(rc));
  return std::nullopt;
}

void require_utf8(std::string_view bytes) {
  if (auto problem = utf8_problem(bytes)) throw *problem;
}

}  // namespace tptrain::text
