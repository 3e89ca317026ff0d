#include "io/deck_text.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <stdexcept>

#include <charconv>
#include <cmath>

namespace tptrain::io {

namespace {

// `quote` and backslash escaped, control characters as \uXXXX.
std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u == 0x7f)
          out += fmt::format("\\u{:04X}", static_cast<unsigned>(u));
        else
          out += c;
    }
  }
  out += '"';
  return out;
}

// The deck's text as a table; a parse error becomes "cannot be parsed: ..." (the caller names the file).
toml::table parse_deck_text(const std::string& text) {
  try {
    return toml::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("cannot be parsed: ") + e.what());
  }
}

}  // namespace

std::string toml_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string toml_string(std::string_view s) { return quoted(s); }

double round_decimal(double v) {
  if (!std::isfinite(v)) return v;
  const std::string text = fmt::format("{:.15g}", v);
  double out = v;
  std::from_chars(text.data(), text.data() + text.size(), out);
  return out;
}

std::map<std::string, std::optional<std::int64_t>> deck_text_integers(const std::string& text,
                                                                      const std::string& section,
                                                                      const std::vector<std::string>& keys) {
  const toml::table table = parse_deck_text(text);
  std::map<std::string, std::optional<std::int64_t>> out;
  for (const auto& key : keys) out[key] = table[section][key].value<std::int64_t>();
  return out;
}

std::map<std::string, std::optional<std::string>> deck_text_scalars(const std::string& text,
                                                                    const std::string& section,
                                                                    const std::vector<std::string>& keys) {
  const toml::table table = parse_deck_text(text);
  std::map<std::string, std::optional<std::string>> out;
  for (const auto& key : keys) {
    const auto node = table[section][key];
    if (const auto s = node.value<std::string>(); s && node.is_string()) out[key] = *s;
    else if (node.is_boolean()) out[key] = *node.value<bool>() ? "true" : "false";
    else if (node.is_integer()) out[key] = std::to_string(*node.value<std::int64_t>());
    else if (node.is_floating_point()) out[key] = fmt::format("{}", *node.value<double>());
    else out[key] = std::nullopt;
  }
  return out;
}

}  // namespace tptrain::io
