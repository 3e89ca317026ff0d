#include "io/hf_config.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <utility>

#include "io/deck_path.hpp"
#include "io/path_text.hpp"

namespace tptrain::io {

struct HfConfigFields::Json {
  nlohmann::json j;
};

HfConfigFields::HfConfigFields(const std::string& path) : path_(path), json_(std::make_unique<Json>()) {
  // Before the stream: a folder or a FIFO would "open" and fail (or block) in the parser.
  if (const std::string problem = regular_file_problem(path); !problem.empty()) fail(problem);
  std::ifstream in(path);
  if (!in) fail("cannot be read");
  try {
    json_->j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("not valid JSON: ") + e.what());
  }
  if (!json_->j.is_object()) fail("not a JSON object");
}

HfConfigFields::HfConfigFields(std::string path, std::string prefix, std::unique_ptr<Json> json)
    : path_(std::move(path)), prefix_(std::move(prefix)), json_(std::move(json)) {}
HfConfigFields::HfConfigFields(HfConfigFields&&) noexcept = default;
HfConfigFields::~HfConfigFields() = default;

std::optional<HfConfigFields> HfConfigFields::object(const char* key) const {
  if (!has(key) || is_null(key)) return std::nullopt;
  const nlohmann::json& v = json_->j[key];
  if (!v.is_object()) fail(name(key) + " = " + v.dump() + ": expected an object or null");
  auto json = std::make_unique<Json>();
  json->j = v;
  return HfConfigFields(path_, name(key) + ".", std::move(json));
}

std::vector<std::string> HfConfigFields::keys() const {
  std::vector<std::string> out;
  for (const auto& item : json_->j.items()) out.push_back(item.key());
  return out;
}

void HfConfigFields::fail(const std::string& what) const {
  throw std::runtime_error("Hugging Face config " + display_path(path_) + ": " + what);
}

bool HfConfigFields::has(const char* key) const { return json_->j.contains(key); }
bool HfConfigFields::is_null(const char* key) const { return has(key) && json_->j[key].is_null(); }
bool HfConfigFields::is_number(const char* key) const { return has(key) && json_->j[key].is_number(); }

std::optional<int> HfConfigFields::at_least(const char* key, int least, const char* what) const {
  if (!has(key) || is_null(key)) return std::nullopt;
  const nlohmann::json& v = json_->j[key];
  if (!v.is_number_integer() || v.get<std::int64_t>() < least || v.get<std::int64_t>() > std::numeric_limits<int>::max())
    fail(name(key) + " = " + v.dump() + ": expected " + what);
  return v.get<int>();
}
std::optional<int> HfConfigFields::positive(const char* key) const { return at_least(key, 1, "a positive integer"); }
std::optional<int> HfConfigFields::non_negative(const char* key) const {
  return at_least(key, 0, "an integer >= 0");
}

void HfConfigFields::text(const char* key, std::string* out) const {
  if (!has(key)) return;
  if (!json_->j[key].is_string()) fail(name(key) + " = " + json_->j[key].dump() + ": expected a string");
  *out = json_->j[key].get<std::string>();
}

void HfConfigFields::flag(const char* key, bool* out) const {
  if (!has(key)) return;
  if (!json_->j[key].is_boolean()) fail(name(key) + " = " + json_->j[key].dump() + ": expected true or false");
  *out = json_->j[key].get<bool>();
}

void HfConfigFields::number(const char* key, double* out) const {
  if (!has(key)) return;
  if (!json_->j[key].is_number()) fail(name(key) + " = " + json_->j[key].dump() + ": expected a number");
  *out = json_->j[key].get<double>();
}

std::optional<int> HfConfigFields::integer(const char* key) const {
  if (!has(key) || !json_->j[key].is_number_integer()) return std::nullopt;
  const std::int64_t v = json_->j[key].get<std::int64_t>();
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(v);
}

std::optional<std::vector<int>> HfConfigFields::positive_list(const char* key) const {
  if (!has(key) || is_null(key)) return std::nullopt;
  const nlohmann::json& v = json_->j[key];
  const auto positive_int = [](const nlohmann::json& x) {
    return x.is_number_integer() && x.get<std::int64_t>() >= 1 && x.get<std::int64_t>() <= std::numeric_limits<int>::max();
  };
  if (!v.is_array() || !std::all_of(v.begin(), v.end(), positive_int))
    fail(name(key) + " = " + v.dump() + ": expected a list of positive integers");
  return v.get<std::vector<int>>();
}

struct HfConfigWriter::Json {
  nlohmann::ordered_json j;
};

HfConfigWriter::HfConfigWriter() : json_(std::make_unique<Json>()) {}
HfConfigWriter::HfConfigWriter(HfConfigWriter&&) noexcept = default;
HfConfigWriter::~HfConfigWriter() = default;

HfConfigWriter& HfConfigWriter::set(const char* key, int value) {
  json_->j[key] = value;
  return *this;
}
HfConfigWriter& HfConfigWriter::set(const char* key, double value) {
  json_->j[key] = value;
  return *this;
}
HfConfigWriter& HfConfigWriter::set(const char* key, bool value) {
  json_->j[key] = value;
  return *this;
}
HfConfigWriter& HfConfigWriter::set(const char* key, const char* value) { return set(key, std::string(value)); }
HfConfigWriter& HfConfigWriter::set(const char* key, const std::string& value) {
  json_->j[key] = value;
  return *this;
}
HfConfigWriter& HfConfigWriter::set(const char* key, const std::vector<std::string>& values) {
  json_->j[key] = values;
  return *this;
}
HfConfigWriter& HfConfigWriter::set(const char* key, std::optional<int> value) {
  if (value)
    json_->j[key] = *value;
  else
    json_->j[key] = nullptr;
  return *this;
}

HfConfigWriter& HfConfigWriter::set(const char* key, const HfConfigWriter& object) {
  json_->j[key] = object.json_->j;
  return *this;
}

std::string HfConfigWriter::text() const { return json_->j.dump(2) + "\n"; }
std::string HfConfigWriter::sorted_text() const {
  return nlohmann::json::parse(json_->j.dump()).dump(2) + "\n";  // nlohmann::json keeps its keys sorted
}

}  // namespace tptrain::io
