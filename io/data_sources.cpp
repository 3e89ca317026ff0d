#include "io/data_sources.hpp"

#include <fmt/format.h>

#include "io/deck_text.hpp"

namespace tptrain::io {

namespace {
std::string entry_text(const DataSource& s) {
  return fmt::format("{{path = {}, weight = {}}}", toml_string(s.path), toml_float(s.weight));
}
}  // namespace

std::string DataSources::text() const {
  if (!is_blend()) return toml_string(empty() ? std::string() : sources.front().path);
  std::string out = "[";
  for (std::size_t i = 0; i < sources.size(); ++i) out += (i > 0 ? ", " : "") + entry_text(sources[i]);
  return out + "]";
}

bool operator==(const DataSources& a, const DataSources& b) {
  if (a.sources.size() != b.sources.size()) return false;
  for (std::size_t i = 0; i < a.sources.size(); ++i)
    if (a.sources[i].path != b.sources[i].path || a.sources[i].weight != b.sources[i].weight) return false;
  return true;
}

std::string source_name(const std::string& key, const DataSources& d, std::size_t i) {
  if (!d.is_blend() || i >= d.size()) return key;
  return fmt::format("{}[{}] {}", key, i, entry_text(d.sources[i]));
}

}  // namespace tptrain::io
