// The one writer of tptrain's JSON lines: the last line of `plan`, `bench` and `eval`, `check --json`
// and every record of metrics.jsonl. Whatever the values, the text is strict JSON (RFC 8259):
// strings escaped, and a number that is not finite written as null (JSON has no NaN or Infinity,
// and Python's json.loads would otherwise read "inf" or "-nan" only by accident). The keys written
// as null are remembered, so that the command can say why in its text output.
//
// The layout is the one tptrain has always printed, `{"key": value, "key": value}` on one line,
// which scripts and tests match as text; a library writer (nlohmann's dump) would drop the spaces.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tptrain::io {

// How a finite double is written.
struct NumberFormat {
  enum class Notation {
    shortest,  // the shortest text that reads back as the same double, always with '.', 'e' (1.0, 3e-05)
    general,   // printf's %.<precision>g
    exponent,  // %.<precision>e
    fixed,     // %.<precision>f
  };
  Notation notation = Notation::shortest;
  int precision = 0;
};
constexpr NumberFormat digits(int precision) { return {NumberFormat::Notation::general, precision}; }
constexpr NumberFormat exponent(int precision) { return {NumberFormat::Notation::exponent, precision}; }
constexpr NumberFormat fixed(int precision) { return {NumberFormat::Notation::fixed, precision}; }

// `v` as a JSON number, or null when it is not finite.
std::string json_number(double v, NumberFormat format = {});
// `s` as a JSON string: quote, backslash and control characters escaped; bytes that are not
// UTF-8 (a path in another encoding) as U+FFFD, since JSON text is UTF-8.
std::string json_string(std::string_view s);

// One JSON object, its members in the order they are added.
class JsonObject {
 public:
  template <class Integer, std::enable_if_t<std::is_integral_v<Integer> && !std::is_same_v<Integer, bool>, int> = 0>
  JsonObject& integer(std::string_view key, Integer v) {
    return member(key, fmt::format("{}", v));
  }
  JsonObject& number(std::string_view key, double v, NumberFormat format = {});
  JsonObject& string(std::string_view key, std::string_view v);
  JsonObject& boolean(std::string_view key, bool v);
  JsonObject& object(std::string_view key, const JsonObject& v);
  JsonObject& strings(std::string_view key, const std::vector<std::string>& v);
  JsonObject& numbers(std::string_view key, const std::vector<double>& v, NumberFormat format = {});
  JsonObject& integers(std::string_view key, const std::vector<std::int64_t>& v);
  JsonObject& objects(std::string_view key, const std::vector<JsonObject>& v);

  // {"key": value, ...}
  const std::string& text() const { return text_; }
  // The members written as null because their value was not finite, with that value; nested
  // ones as "outer.inner" and "outer[i].inner".
  const std::vector<std::pair<std::string, double>>& non_finite() const { return non_finite_; }

 private:
  JsonObject& member(std::string_view key, std::string_view value);
  void adopt(std::string_view prefix, const JsonObject& inner);
  std::string text_ = "{}";
  std::vector<std::pair<std::string, double>> non_finite_;
};

// "loss = nan, eval_loss = -inf": the members of `o` written as null, for a message.
std::string describe_non_finite(const JsonObject& o);

}  // namespace tptrain::io
