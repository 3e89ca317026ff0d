#include "text/json_line_text.hpp"

#include <nlohmann/json.hpp>

#include "text/text_error.hpp"

namespace tptrain::text {

std::string json_line_text(std::string_view line) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw TextError(std::string("not a JSON line: ") + e.what());
  }
  if (!json.is_object()) throw TextError(std::string("expected a JSON object with a string \"text\", got a JSON ") + json.type_name());
  const auto text = json.find("text");
  if (text == json.end()) throw TextError("expected a JSON object with a string \"text\", got an object without \"text\"");
  if (!text->is_string())
    throw TextError(std::string("expected a JSON object with a string \"text\", got \"text\" of type ") + text->type_name());
  return std::move(text->get_ref<std::string&>());
}

}  // namespace tptrain::text
