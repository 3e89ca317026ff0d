#include "io/json_line.hpp"

#include <cmath>

namespace tptrain::io {

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (Unicode Table 3-7), 0 when it is not one.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  if (b < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    n = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    n = 3;
    if (b == 0xE0) lo = 0xA0;  // overlong
    if (b == 0xED) hi = 0x9F;  // surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    n = 4;
    if (b == 0xF0) lo = 0x90;  // overlong
    if (b == 0xF4) hi = 0x8F;  // beyond U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\u{:04X}", static_cast<unsigned>(u));
    } else if (u >= 0x80) {
      // JSON text is UTF-8: a byte that starts no valid sequence (a path in another encoding)
      // becomes U+FFFD, as a decoder would show it.
      const std::size_t n = utf8_sequence(s, i);
      if (n == 0) {
        out += "\\uFFFD";
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    } else {
      out += c;
    }
    ++i;
  }
  return out + '"';
}

std::string json_number(double v, NumberFormat format) {
  if (!std::isfinite(v)) return "null";
  switch (format.notation) {
    case NumberFormat::Notation::general: return fmt::format("{:.{}g}", v, format.precision);
    case NumberFormat::Notation::exponent: return fmt::format("{:.{}e}", v, format.precision);
    case NumberFormat::Notation::fixed: return fmt::format("{:.{}f}", v, format.precision);
    case NumberFormat::Notation::shortest: break;
  }
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

JsonObject& JsonObject::member(std::string_view key, std::string_view value) {
  text_.pop_back();  // '}'
  if (text_.size() > 1) text_ += ", ";
  text_ += json_string(key);
  text_ += ": ";
  text_.append(value);
  text_ += '}';
  return *this;
}

JsonObject& JsonObject::number(std::string_view key, double v, NumberFormat format) {
  if (!std::isfinite(v)) non_finite_.emplace_back(std::string(key), v);
  return member(key, json_number(v, format));
}

JsonObject& JsonObject::string(std::string_view key, std::string_view v) { return member(key, json_string(v)); }

JsonObject& JsonObject::boolean(std::string_view key, bool v) { return member(key, v ? "true" : "false"); }

void JsonObject::adopt(std::string_view prefix, const JsonObject& inner) {
  for (const auto& [key, value] : inner.non_finite_) non_finite_.emplace_back(std::string(prefix) + "." + key, value);
}

JsonObject& JsonObject::object(std::string_view key, const JsonObject& v) {
  adopt(key, v);
  return member(key, v.text());
}

JsonObject& JsonObject::strings(std::string_view key, const std::vector<std::string>& v) {
  std::string list = "[";
  for (const std::string& s : v) list += (list.size() > 1 ? ", " : "") + json_string(s);
  return member(key, list + "]");
}

JsonObject& JsonObject::numbers(std::string_view key, const std::vector<double>& v, NumberFormat format) {
  std::string list = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) non_finite_.emplace_back(fmt::format("{}[{}]", key, i), v[i]);
    list += (i ? ", " : "") + json_number(v[i], format);
  }
  return member(key, list + "]");
}

JsonObject& JsonObject::integers(std::string_view key, const std::vector<std::int64_t>& v) {
  return member(key, fmt::format("[{}]", fmt::join(v, ", ")));
}

JsonObject& JsonObject::objects(std::string_view key, const std::vector<JsonObject>& v) {
  std::string list = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    list += (i ? ", " : "") + v[i].text();
    adopt(fmt::format("{}[{}]", key, i), v[i]);
  }
  return member(key, list + "]");
}

std::string describe_non_finite(const JsonObject& o) {
  std::string out;
  for (const auto& [key, value] : o.non_finite()) out += fmt::format("{}{} = {}", out.empty() ? "" : ", ", key, value);
  return out;
}

}  // namespace tptrain::io
