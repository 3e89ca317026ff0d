#include "src/data/blend_resume.hpp"

#include <fmt/format.h>

#include <cstddef>

#include "io/path_text.hpp"

namespace tptrain::data {
namespace {

constexpr std::size_t kNone = static_cast<std::size_t>(-1);

std::string quoted(const std::string& path) { return "\"" + io::display_path(path) + "\""; }

}  // namespace

BlendResume resume_blend(const io::BlendRecord& saved, const io::BlendRecord& now, const std::string& key) {
  const std::vector<io::BlendEntryRecord>& old = saved.entries;
  const std::vector<io::BlendEntryRecord>& cur = now.entries;
  std::vector<std::size_t> match(cur.size(), kNone);  // the checkpoint's entry of each deck entry
  std::vector<bool> taken(old.size(), false);
  for (std::size_t j = 0; j < cur.size(); ++j)
    for (std::size_t i = 0; i < old.size(); ++i)
      if (!taken[i] && old[i].path == cur[j].path) {
        match[j] = i, taken[i] = true;
        break;
      }
  for (std::size_t j = 0; j < cur.size(); ++j)
    if (match[j] == kNone && j < old.size() && !taken[j]) match[j] = j, taken[j] = true;

  BlendResume r;
  r.sequences = saved.sequences;
  for (std::size_t j = 0; j < cur.size(); ++j) {
    const io::BlendEntryRecord& c = cur[j];
    const std::string name = fmt::format("{}[{}] {}", key, j, quoted(c.path));
    if (match[j] == kNone) {
      r.drawn.push_back(0);
      r.changes.push_back(fmt::format("{}: added (weight {}, {} tokens)", name, c.weight, c.tokens));
      continue;
    }
    const std::size_t i = match[j];
    const io::BlendEntryRecord& o = old[i];
    r.drawn.push_back(o.drawn);
    std::vector<std::string> how;
    if (o.path != c.path) how.push_back("path was " + quoted(o.path));
    if (i != j) how.push_back(fmt::format("was {}[{}]", key, i));
    if (o.weight != c.weight) how.push_back(fmt::format("weight {} -> {}", o.weight, c.weight));
    if (o.tokens != c.tokens) how.push_back(fmt::format("{} -> {} tokens", o.tokens, c.tokens));
    if (!how.empty()) r.changes.push_back(fmt::format("{}: {}", name, fmt::join(how, ", ")));
  }
  for (std::size_t i = 0; i < old.size(); ++i)
    if (!taken[i])
      r.changes.push_back(fmt::format("{} ({}[{}] of the checkpoint, weight {}, {} tokens): removed ({} sequences "
                                      "were drawn from it)",
                                      quoted(old[i].path), key, i, old[i].weight, old[i].tokens, old[i].drawn));
  return r;
}

}  // namespace tptrain::data
