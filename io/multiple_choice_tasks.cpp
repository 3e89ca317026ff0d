#include "io/multiple_choice_tasks.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <limits>
#include <stdexcept>

#include "io/deck_path.hpp"
#include "io/path_text.hpp"

namespace tptrain::io {

namespace {

// Every rank holds the whole file and its tokens; HellaSwag's validation set is 11 MB.
constexpr std::uint64_t kMaxTaskFileBytes = std::uint64_t{1} << 30;

// A value in a message: its JSON text, cut short (an ending can be a paragraph).
std::string shown(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

MultipleChoiceExample parse_line(std::string_view line, const std::function<void(const std::string&)>& fail) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("not a JSON line: ") + e.what());
  }
  if (!j.is_object()) fail(std::string("expected a JSON object {\"context\": ..., \"endings\": [...], \"label\": k}, got a JSON ") + j.type_name());
  MultipleChoiceExample ex;
  const auto context = j.find("context");
  if (context == j.end()) fail("no \"context\"");
  if (!context->is_string()) fail("\"context\" = " + shown(*context) + ": expected a string");
  ex.context = context->get<std::string>();
  const auto endings = j.find("endings");
  if (endings == j.end()) fail("no \"endings\"");
  if (!endings->is_array()) fail("\"endings\" = " + shown(*endings) + ": expected a list of strings");
  if (endings->empty()) fail("\"endings\" is an empty list: expected at least one ending");
  for (std::size_t k = 0; k < endings->size(); ++k) {
    const nlohmann::json& e = (*endings)[k];
    if (!e.is_string()) fail("ending " + std::to_string(k) + " = " + shown(e) + ": expected a string");
    ex.endings.push_back(e.get<std::string>());
    // Its log-likelihood would be a sum over no tokens, and acc_norm's divisor 0 bytes.
    if (ex.endings.back().empty()) fail("ending " + std::to_string(k) + " is empty: expected some text");
  }
  const auto label = j.find("label");
  if (label == j.end()) fail("no \"label\"");
  // A JSON integer, not 1.0 or "1" or true: a file that wrote its labels as text is probably
  // not the file meant.
  if (!label->is_number_integer()) fail("\"label\" = " + shown(*label) + ": expected an integer");
  const bool negative = label->is_number_integer() && !label->is_number_unsigned() && label->get<std::int64_t>() < 0;
  if (negative || label->get<std::uint64_t>() >= endings->size())
    fail("\"label\" = " + shown(*label) + ": expected an ending's index, 0 to " + std::to_string(endings->size() - 1));
  ex.label = label->get<int>();
  return ex;
}

}  // namespace

std::vector<MultipleChoiceExample> parse_multiple_choice_tasks(std::string_view text, const std::string& name) {
  std::vector<MultipleChoiceExample> out;
  std::int64_t number = 0;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t newline = text.find('\n', at);
    const std::size_t stop = newline == std::string_view::npos ? text.size() : newline;
    std::string_view line = text.substr(at, stop - at);
    at = stop + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    const auto fail = [&](const std::string& what) {
      throw std::runtime_error(display_path(name) + ":" + std::to_string(number) + ": " + what);
    };
    out.push_back(parse_line(line, fail));
    out.back().line = number;
  }
  if (out.empty()) throw std::runtime_error(display_path(name) + ": no examples (expected JSON Lines, one example a line)");
  return out;
}

std::vector<MultipleChoiceExample> read_multiple_choice_tasks(const std::string& path) {
  std::string text;
  if (const std::string problem = read_regular_file(path, kMaxTaskFileBytes, text); !problem.empty())
    throw std::runtime_error("task file " + display_path(path) + " " + problem);
  return parse_multiple_choice_tasks(text, path);
}

}  // namespace tptrain::io
