#include "text/utf8_stream.hpp"

#include "text/utf8.hpp"

namespace tptrain::text {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Whether `tail` (which PCRE2 found cut short at the end) can still become one character: a lead
// byte of a 2-, 3- or 4-byte form (C2..F4) followed only by continuation bytes, fewer than it needs.
bool may_complete(std::string_view tail) {
  const auto lead = static_cast<unsigned char>(tail[0]);
  const std::size_t need = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
  if (need == 0 || tail.size() >= need) return false;
  for (std::size_t i = 1; i < tail.size(); ++i)
    if ((static_cast<unsigned char>(tail[i]) & 0xC0) != 0x80) return false;
  return true;
}

}  // namespace

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  while (!pending_.empty()) {
    const std::optional<InvalidUtf8> problem = utf8_problem(pending_);
    if (!problem) {
      out += pending_;
      pending_.clear();
      break;
    }
    out.append(pending_, 0, problem->offset());
    pending_.erase(0, problem->offset());
    if (may_complete(pending_)) break;  // PCRE2 also calls a bad tail "truncated": checked here
    out += kReplacement;
    pending_.erase(0, 1);
  }
  return out;
}

std::string Utf8Stream::finish() {
  if (pending_.empty()) return {};
  pending_.clear();
  return std::string(kReplacement);
}

}  // namespace tptrain::text
