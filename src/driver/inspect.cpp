#include "src/driver/inspect.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/model/spec/block_spec.hpp"
#include "io/deck_text.hpp"
#include "io/path_text.hpp"

namespace tptrain::driver {
namespace {

constexpr std::size_t kDeckLines = 12;       // deck lines shown
constexpr std::size_t kListedFailures = 5;   // in the verdict

// ---- values -----------------------------------------------------------------------------------

std::string grouped(std::uint64_t v) {
  std::string digits = std::to_string(v), s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

std::string size_text(std::uintmax_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  const double kib = static_cast<double>(bytes) / 1024.0;
  if (kib < 1024) return fmt::format("{:.1f} KiB", kib);
  if (kib < 1024 * 1024) return fmt::format("{:.2f} MiB", kib / 1024);
  return fmt::format("{:.2f} GiB", kib / 1024 / 1024);
}

std::string number(double v) { return fmt::format("{:.6g}", v); }

// ---- output -----------------------------------------------------------------------------------

void print_attr_line(std::ostream& out, std::string_view label, const std::string& value) {
  out << "  " << fmt::format("{:<12} {}", label, value) << '\n';
}

// The attributes of group `path` ("train", "optimizer"), one per line, or why there are none.
void print_group_attrs(std::ostream& out, const char* path, const io::GroupSurvey& group) {
  out << "/" << path << '\n';
  if (group.state == io::GroupSurvey::absent) {
    out << "  (absent)\n";
    return;
  }
  if (group.state == io::GroupSurvey::unreadable) {
    out << "  (unreadable: " << group.error << ")\n";
    return;
  }
  if (group.attributes.empty()) out << "  (no attributes)\n";
  for (const auto& [name, text] : group.attributes) print_attr_line(out, name, text);
}

// /train/blend, data.train's record (io/checkpoint_blend.hpp), one line per entry; nothing for a
// checkpoint without one (written before the record, or not by a training run).
void print_blend(std::ostream& out, const io::BlendRecord& blend) {
  if (blend.empty()) return;
  out << "/train/blend (data.train; " << grouped(static_cast<std::uint64_t>(blend.sequences))
      << " sequences drawn)\n";
  for (std::size_t i = 0; i < blend.entries.size(); ++i) {
    const io::BlendEntryRecord& e = blend.entries[i];
    out << fmt::format("  [{}] \"{}\": weight {}, {} tokens, {} sequences drawn\n", i, io::display_path(e.path),
                       e.weight, grouped(static_cast<std::uint64_t>(e.tokens)),
                       grouped(static_cast<std::uint64_t>(e.drawn)));
  }
}

// The block specification and shape the deck states: a deck from before model.architecture
// (issue 23) is a gpt2 one, tied, with kv_heads = heads; the choices it leaves out are its
// preset's (src/model/spec/block_spec.hpp). The choices are shown where they differ from the preset's.
std::string model_line(const std::string& deck) {
  std::map<std::string, std::optional<std::string>> v;
  try {
    v = io::deck_text_scalars(deck, "model",
                              {"architecture", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "tie_embeddings",
                               "norm", "mlp", "position", "qkv_bias", "linear_bias"});
  } catch (const std::exception&) {
    return "(the deck does not parse)";
  }
  const std::string arch = v["architecture"].value_or("gpt2");
  const model::BlockPreset* preset = model::block_preset(arch);
  std::string changed;
  if (preset != nullptr) {
    const model::BlockSpec& p = preset->spec;
    const auto differs = [&](const char* key, const std::string& preset_value) {
      if (v[key] && *v[key] != preset_value) changed += fmt::format("{}{} {}", changed.empty() ? "" : ", ", key, *v[key]);
    };
    differs("norm", p.norm);
    differs("mlp", p.mlp);
    differs("position", p.position);
    differs("qkv_bias", p.qkv_bias ? "true" : "false");
    differs("linear_bias", p.linear_bias ? "true" : "false");
  }
  const std::string heads = v["heads"].value_or("?");
  const bool preset_tied = preset == nullptr || preset->spec.tie_embeddings;
  const bool tied = v["tie_embeddings"].value_or(preset_tied ? "true" : "false") == "true";
  return fmt::format("{}{}, {} layers, hidden {}, heads {}, kv_heads {}, ffn_hidden {}, {} embeddings", arch,
                     changed.empty() ? "" : " (" + changed + ")", v["layers"].value_or("?"),
                     v["hidden"].value_or("?"), heads, v["kv_heads"].value_or(heads), v["ffn_hidden"].value_or("?"),
                     tied ? "tied" : "untied");
}

// Root attributes as stored (each one that exists, described for people), then the deck's
// first lines. The verdict on them is the survey's problems, not this function's.
void print_root(std::ostream& out, const io::CheckpointSurvey& s) {
  const auto value = [&](const char* name) { return s.root.at(name).text; };
  std::string format = value("format");
  if (format.size() >= 2 && format.front() == '"' && format.back() == '"')
    format = format.substr(1, format.size() - 2);
  print_attr_line(out, "format", format + ", format_version " + value("format_version"));
  print_attr_line(out, "step", value("step"));
  print_attr_line(out, "tokens_seen", value("tokens_seen"));
  print_attr_line(out, "layout", "tp " + value("tp") + ", pp " + value("pp") + ", dp " +
                                     value("dp") + " (at save time)");
  // Written since mixed precision; older checkpoints were all fp32.
  print_attr_line(out, "precision", s.root.at("precision").exists ? value("precision")
                                                                    : std::string("fp32 (no attribute)"));
  if (!s.deck_read) {
    print_attr_line(out, "deck", value("deck"));
    return;
  }
  const std::string& deck = s.meta.deck;
  print_attr_line(out, "model", model_line(deck));
  std::vector<std::string_view> lines;
  std::string_view rest(deck);
  while (!rest.empty()) {
    const std::size_t nl = rest.find('\n');
    lines.push_back(rest.substr(0, nl));
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  print_attr_line(out, "deck",
                  fmt::format("{} bytes, {} lines{}", deck.size(), lines.size(),
                              lines.size() > kDeckLines ? fmt::format(" (first {}):", kDeckLines)
                                                        : std::string(lines.empty() ? "" : ":")));
  for (std::size_t i = 0; i < lines.size() && i < kDeckLines; ++i)
    out << (lines[i].empty() ? "    |" : "    | ") << lines[i] << '\n';
  if (lines.size() > kDeckLines) out << "    | ...\n";
}

void print_table(std::ostream& out, const std::vector<io::DatasetSurvey>& reports) {
  struct Row {
    std::string cells[7];
  };
  std::vector<Row> rows;
  rows.push_back(Row{{"name", "shape", "dtype", "l2_norm", "min", "max", "checksum"}});
  for (const io::DatasetSurvey& r : reports) {
    Row row{{r.name, r.shape, r.dtype, "-", "-", "-", r.check_text()}};
    if (r.numeric && r.elements > 0 && r.check != io::ChecksumCheck::unreadable) {
      row.cells[3] = number(std::sqrt(r.sum_squares));
      if (r.nans < r.elements) {
        row.cells[4] = number(r.min);
        row.cells[5] = number(r.max);
      }
      if (r.nans > 0) row.cells[6] += fmt::format("  [{} NaN]", r.nans);
    }
    rows.push_back(std::move(row));
  }
  std::size_t width[7] = {};
  for (const Row& row : rows)
    for (std::size_t c = 0; c < 7; ++c) width[c] = std::max(width[c], row.cells[c].size());
  for (const Row& row : rows) {
    std::string line = " ";
    for (std::size_t c = 0; c < 7; ++c) {
      line += ' ';
      if (c == 6)
        line += row.cells[c];
      else if (c >= 3 && c <= 5)  // numbers right-aligned
        line += fmt::format("{:>{}}", row.cells[c], width[c]) + ' ';
      else
        line += fmt::format("{:<{}}", row.cells[c], width[c]) + ' ';
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  }
}

}  // namespace

int inspect_checkpoint(const std::string& path, std::ostream& out, std::ostream& err,
                       const io::ExpectedDatasets& expected) {
  io::CheckpointSurvey s;
  try {
    s = io::survey_checkpoint(path, expected);
  } catch (const std::exception& e) {
    err << e.what() << '\n';
    return 1;
  }
  out << "checkpoint " << path;
  if (s.bytes) out << " (" << size_text(*s.bytes) << ")";
  out << '\n';
  print_root(out, s);
  print_group_attrs(out, "train", s.train);
  print_blend(out, s.meta.blend);
  print_group_attrs(out, "optimizer", s.optimizer);
  if (!s.list_error.empty()) {
    err << s.list_error << '\n';
    return 1;
  }
  out << "datasets: " << s.datasets.size() << ", " << grouped(s.elements) << " elements\n";
  if (!s.datasets.empty()) print_table(out, s.datasets);
  for (const std::string& p : s.problems) out << "  problem: " << p << '\n';

  std::vector<const io::DatasetSurvey*> failed;
  for (const io::DatasetSurvey& r : s.datasets)
    if (r.fails()) failed.push_back(&r);
  std::string verdict;
  for (std::size_t i = 0; i < s.problems.size() && i < kListedFailures; ++i)
    verdict += (i > 0 ? "; " : "") + s.problems[i];
  if (s.problems.size() > kListedFailures)
    verdict += fmt::format("; and {} more problems", s.problems.size() - kListedFailures);
  if (!failed.empty()) {
    std::string list;
    for (std::size_t i = 0; i < failed.size() && i < kListedFailures; ++i) {
      const io::DatasetSurvey& r = *failed[i];
      list += (i > 0 ? ", " : "") + r.name + " (" +
              (r.check == io::ChecksumCheck::mismatch ? "checksum mismatch"
               : r.check == io::ChecksumCheck::missing ? "no checksum"
               : r.check == io::ChecksumCheck::not_float ? "not floating-point"
               : r.check == io::ChecksumCheck::not_float32 ? "not float32"
                                               : "unreadable") +
              ")";
    }
    if (failed.size() > kListedFailures)
      list += fmt::format(", and {} more", failed.size() - kListedFailures);
    const std::string datasets = fmt::format("{} of {} datasets fail verification: {}",
                                             failed.size(), s.datasets.size(), list);
    verdict = verdict.empty() ? datasets : verdict + "; " + datasets;
  }
  if (verdict.empty()) {
    out << "OK: " << s.datasets.size() << " datasets, every checksum verifies\n";
    return 0;
  }
  out << "FAILED: " << verdict << '\n';
  err << path << ": " << verdict << '\n';
  return 1;
}

}  // namespace tptrain::driver
