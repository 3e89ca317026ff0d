// Input deck: parse (toml++), apply --set overrides, validate everything, resolve paths.
// See io/deck.hpp for the contract and docs/deck-reference.md for every key.
#include "io/deck.hpp"

#include "base/layout_rules.hpp"

#include "io/data_paths.hpp"
#include "io/deck_keys.hpp"
#include "io/deck_path.hpp"
#include "io/deck_text.hpp"
#include "io/path_text.hpp"
#include "src/model/spec/block_spec.hpp"
#include "src/model/spec/sublayer_kinds.hpp"
#include "text/gpt2_files.hpp"
#include "text/tiktoken_encoding.hpp"
#include "text/tiktoken_ranks.hpp"
#include "text/tokenizer.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>
#include <variant>

namespace tptrain::io {

namespace {

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

}  // namespace

DeckError::DeckError(std::vector<std::string> problems)
    : std::runtime_error(join(problems, "\n")), problems_(std::move(problems)) {}

const std::vector<std::string>& DeckError::problems() const { return problems_; }

namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

// ---- the schema (io/deck_keys.hpp) ------------------------------------------------------------

bool is_section(std::string_view s) {
  const auto& sections = deck_sections();
  return std::find(sections.begin(), sections.end(), s) != sections.end();
}

std::string full_name(std::string_view section, std::string_view key) {
  return std::string(section) + "." + std::string(key);
}

std::string keys_of(std::string_view section) {
  std::vector<std::string> names;
  for (const DeckKey& k : deck_keys())
    if (k.section == section) names.emplace_back(k.key);
  return join(names, ", ");
}

std::string section_list() {
  std::vector<std::string> names;
  for (std::string_view s : deck_sections()) names.push_back("[" + std::string(s) + "]");
  return join(names, ", ");
}

bool is_text(const DeckKey& k) {
  return k.type() == KeyType::String || k.type() == KeyType::Path;
}

// ---- "did you mean" ----------------------------------------------------------------------------

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Optimal string alignment distance (Levenshtein plus adjacent transpositions), case-blind.
std::size_t edit_distance(std::string_view a_in, std::string_view b_in) {
  const std::string a = lower(a_in), b = lower(b_in);
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

constexpr std::size_t kMaxSuggestDistance = 2;

// Closest valid key for an unknown `section.key`: the same name in another section first (a key
// put in the wrong section: model.lr is optimizer.lr, not model.mlp), then the closest key of the
// same section (distance <= 2). "" when nothing is close.
std::string suggest_key(std::string_view section, std::string_view key) {
  for (const DeckKey& k : deck_keys())
    if (k.section != section && edit_distance(key, k.key) == 0) return full_name(k.section, k.key);
  std::string best;
  std::size_t best_d = kMaxSuggestDistance + 1;
  for (const DeckKey& k : deck_keys()) {
    if (k.section != section) continue;
    const std::size_t d = edit_distance(key, k.key);
    if (d < best_d) best_d = d, best = full_name(k.section, k.key);
  }
  return best;
}

// For a key written outside any section (or a --set without a section).
std::string suggest_any_key(std::string_view key) {
  std::string best;
  std::size_t best_d = kMaxSuggestDistance + 1;
  for (const DeckKey& k : deck_keys()) {
    const std::size_t d = edit_distance(key, k.key);
    if (d < best_d) best_d = d, best = full_name(k.section, k.key);
  }
  return best;
}

std::string suggest_section(std::string_view section) {
  std::string best;
  std::size_t best_d = kMaxSuggestDistance + 1;
  for (std::string_view s : deck_sections()) {
    const std::size_t d = edit_distance(section, s);
    if (d < best_d) best_d = d, best = std::string(s);
  }
  return best;
}

// ---- showing values ----------------------------------------------------------------------------

// A number inside a sentence ("expected a number > 0"): no forced ".0".
std::string plain_number(double v) { return fmt::format("{}", v); }

std::string show(const toml::node& n) {
  if (auto v = n.as_integer()) return std::to_string(v->get());
  if (auto v = n.as_floating_point()) return toml_float(v->get());
  if (auto v = n.as_string()) return toml_string(v->get());
  if (auto v = n.as_boolean()) return v->get() ? "true" : "false";
  if (n.is_table()) return "{...}";
  std::ostringstream os;
  n.visit([&os](const auto& x) { os << x; });
  std::string s = os.str();
  std::replace(s.begin(), s.end(), '\n', ' ');
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string type_phrase(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    default:
      return "nothing";
  }
}

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(first, last - first + 1));
}

// ---- where a value came from -------------------------------------------------------------------

enum class From { File, Override, Default };

struct Origin {
  From from = From::Default;
  std::string where;      // "deck.toml:3", "--set model.layers=8", or "deck.toml" (defaults)
  std::size_t order = 0;  // line (File) or position on the command line (Override)
};

struct Problem {
  Origin origin;
  std::string text;  // "<section.key> = <value>: expected <what>"
};

// One deck key: the value given for it (from the file or a --set), if any.
struct Field {
  const DeckKey* def = nullptr;
  const toml::node* node = nullptr;  // nullptr: not given, the default applies
  Origin origin;
  bool ok = true;            // the given value passed its own checks (or is the default)
  std::string default_note;  // how the default was derived, for messages ("4 * model.hidden")
  std::string out_of_range;  // a --set number no TOML number holds ("1e999"), as typed
  std::string label;         // messages name this instead of the key: "data.train[1].path"
};

// A term in a cross-key rule (divisibility, ordering).
struct Term {
  std::string name;   // section.key
  std::string value;  // as shown
  const Field* field;
};

class DeckReader {
 public:
  DeckReader(std::string source, const std::string& base_dir, DataFiles data_files)
      : source_(std::move(source)), cwd_(fs::current_path()), data_files_(data_files) {
    deck_dir_ = base_dir.empty() ? cwd_ : fs::absolute(fs::path(base_dir)).lexically_normal();
    for (const DeckKey& k : deck_keys()) {
      Field f;
      f.def = &k;
      f.origin = Origin{From::Default, source_, 0};
      fields_.emplace(full_name(k.section, k.key), std::move(f));
    }
  }

  void apply_overrides(const std::vector<std::string>& overrides);
  bool parse_text(std::string_view text);  // false: syntax error (reported)
  void scan_file();
  Deck build();
  void add_problem(Origin origin, std::string text) {
    problems_.push_back(Problem{std::move(origin), std::move(text)});
  }
  void throw_if_problems();
  // Warnings in the order found, each "where: text" like a problem.
  std::vector<std::string> warnings() const {
    std::vector<std::string> out;
    for (const Problem& w : warnings_) out.push_back(w.origin.where + ": " + w.text);
    return out;
  }

 private:
  Field& field(std::string_view section, std::string_view key) {
    return fields_.at(full_name(section, key));
  }
  void bad(Field& f, const std::string& expected) {
    f.ok = false;
    add_problem(f.origin, fmt::format("{} = {}: expected {}", f.label.empty() ? f.def->name() : f.label,
                                      f.out_of_range.empty() ? show(*f.node) : f.out_of_range,
                                      expected));
  }

  void read_key(const DeckKey& k, Deck& d);
  template <class Int>
  void read_int(Field& f, const IntRange& r, Int& out);
  void read_float(Field& f, const NumberRange& r, double& out);
  void read_bool(Field& f, bool& out);
  bool read_string(Field& f, std::string& out);
  void read_choice(Field& f, const Choice& c, std::string& out);
  bool read_path(Field& f, const PathRule& r, std::string& out);
  void read_sources(Field& f, const PathRule& r, DataSources& out, bool check_files);
  std::string resolve(const std::string& path, const Field& f) const;
  void check_data_file(Field& f, const std::string& resolved);
  void check_data_set(Field& f, const std::string& resolved, const DataPaths& paths);

  // Cross-key rules. The message is reported against the key most likely to have been changed
  // on purpose: a --set over a file value over a default.
  static int weight(const Field& f) {
    return f.origin.from == From::Override ? 2 : f.origin.from == From::File ? 1 : 0;
  }
  static std::string where(const Field& f) {
    if (f.origin.from == From::Default)
      return f.default_note.empty() ? "default" : "default " + f.default_note;
    return f.origin.where;
  }
  // "model.heads = 4 (line 5)" when the message is already about the same file, else
  // "(deck.toml:5)", "(--set model.heads=4)" or "(default)".
  static std::string mention(const Term& t, const Term& subject) {
    const bool same_file =
        t.field->origin.from == From::File && subject.field->origin.from == From::File;
    return fmt::format("{} = {} ({})", t.name, t.value,
                       same_file ? fmt::format("line {}", t.field->origin.order) : where(*t.field));
  }
  void report_on(const Term& subject, const std::string& expected) {
    std::string lhs = fmt::format("{} = {}", subject.name, subject.value);
    if (subject.field->origin.from == From::Default) lhs += " (" + where(*subject.field) + ")";
    add_problem(subject.field->origin, fmt::format("{}: expected {}", lhs, expected));
  }
  void check_multiple(const Term& dividend, const Term& divisor, std::int64_t a, std::int64_t b,
                      std::string_view why);
  void check_batch(const Deck& d);
  void check_not_above(const Term& low, const Term& high, std::string_view kind);
  void check_virtual_stages(const Deck& d);
  void report(const rules::Problem& p);
  void check_tokenizer_pattern(const Deck& d);
  void check_tokenizer(const Deck& d);
  void check_documents(const Deck& d);
  void check_context(const Deck& d);
  void check_experts(const Deck& d);
  void check_shard_group(const Deck& d);
  void check_valid_apart_from_train(const Deck& d);
  // Whether the command reads the files of data.<key> (train, valid; io/deck.hpp, DataFiles).
  bool reads_data_key(std::string_view key) const {
    switch (data_files_) {
      case DataFiles::required:
      case DataFiles::may_be_absent: return true;
      case DataFiles::validation: return key != "train";
      case DataFiles::tokenizer_only: return key != "train" && key != "valid";
      case DataFiles::ignored: break;
    }
    return false;
  }
  void check_tensor_core_shapes(const Deck& d);
  void check_architecture(const Deck& d);

  std::string source_;
  fs::path cwd_;
  fs::path deck_dir_;
  DataFiles data_files_;
  toml::table file_;
  std::vector<std::unique_ptr<toml::table>> override_values_;
  std::map<std::string, Field> fields_;
  std::vector<Problem> problems_;
  std::vector<Problem> warnings_;
};

// ---- overrides ---------------------------------------------------------------------------------

// A --set value TOML could not read that is still a number, only one TOML cannot hold (1e999,
// 99999999999999999999): reported as out of range rather than taken as a string.
bool is_unrepresentable_number(std::string_view text) {
  std::string digits;
  for (char c : text)
    if (c != '_') digits += c;
  if (!digits.empty() && digits[0] == '+') digits.erase(0, 1);
  if (digits.empty()) return false;
  double x = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), x);
  return end == digits.data() + digits.size() &&
         (ec == std::errc() || ec == std::errc::result_out_of_range);
}

void DeckReader::apply_overrides(const std::vector<std::string>& overrides) {
  for (std::size_t i = 0; i < overrides.size(); ++i) {
    const std::string& text = overrides[i];
    Origin origin{From::Override, "--set " + text, i};
    auto malformed = [&](const std::string& why) {
      add_problem(origin, "expected section.key=value (malformed --set argument: " + why + ")");
    };
    const auto eq = text.find('=');
    if (eq == std::string::npos) {
      malformed("no '=' found");
      continue;
    }
    const std::string lhs = trim(std::string_view(text).substr(0, eq));
    const std::string rhs = trim(std::string_view(text).substr(eq + 1));
    if (lhs.empty()) {
      malformed("no section.key before '='");
      continue;
    }
    const auto dot = lhs.find('.');
    if (dot == std::string::npos || dot == 0) {
      const std::string hint = suggest_any_key(dot == 0 ? lhs.substr(1) : lhs);
      malformed(fmt::format("'{}' has no section{}", lhs,
                            hint.empty() ? "" : "; did you mean " + hint + "?"));
      continue;
    }
    const std::string section = lhs.substr(0, dot), key = lhs.substr(dot + 1);
    if (!is_section(section)) {
      const std::string hint = suggest_section(section);
      add_problem(origin, fmt::format("unknown section [{}]{}: expected one of {}", section,
                                      hint.empty() ? "" : " (did you mean [" + hint + "]?)",
                                      section_list()));
      continue;
    }
    const DeckKey* def = find_deck_key(section, key);
    if (!def) {
      const std::string hint = suggest_key(section, key);
      add_problem(origin, fmt::format("unknown key {}{}: [{}] has {}", lhs,
                                      hint.empty() ? "" : " (did you mean " + hint + "?)", section,
                                      keys_of(section)));
      continue;
    }
    // The value is a TOML value if it parses as one (8, 1e-3, true, "x y.txt"); otherwise, and
    // for a string key whenever it is not a TOML string, it is the bare text (x.txt, bf16, 2024).
    auto holder = std::make_unique<toml::table>();
    bool parsed = false;
    try {
      toml::table t = toml::parse("v = " + rhs, std::string_view{"--set"});
      if (t.size() == 1 && t.contains("v")) {
        // data.train / data.valid also take a blend: --set 'data.train=[{path = "a/", weight = 2}, ...]'.
        const bool blend = std::holds_alternative<DataSources& (*)(Deck&)>(def->ref) && t.get("v")->is_array();
        parsed = !is_text(*def) || t.get("v")->is_string() || blend;
        if (parsed) *holder = std::move(t);
      }
    } catch (const toml::parse_error&) {
      parsed = false;
    }
    if (!parsed) holder->insert_or_assign("v", rhs);
    Field& f = fields_.at(lhs);
    f.node = holder->get("v");
    f.origin = origin;
    f.out_of_range.clear();
    if (!parsed && !is_text(*def) && is_unrepresentable_number(rhs)) f.out_of_range = rhs;
    override_values_.push_back(std::move(holder));
  }
}

// ---- the file ----------------------------------------------------------------------------------

bool DeckReader::parse_text(std::string_view text) {
  try {
    file_ = toml::parse(text, std::string_view{source_});
    return true;
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    add_problem(Origin{From::File, fmt::format("{}:{}:{}", source_, b.line, b.column), b.line},
                fmt::format("TOML syntax error: {}", e.description()));
    return false;
  }
}

void DeckReader::scan_file() {
  auto at = [this](const toml::node& n) {
    const auto line = n.source().begin.line;
    return Origin{From::File, fmt::format("{}:{}", source_, line), line};
  };
  for (auto&& [name, node] : file_) {
    const std::string_view sec = name.str();
    if (is_section(sec)) {
      const toml::table* table = node.as_table();
      if (!table) {
        add_problem(at(node),
                    fmt::format("{} = {}: expected a [{}] table (got {}{})", sec, show(node), sec,
                                type_phrase(node),
                                node.is_array() ? "; write [" + std::string(sec) + "], not [[" +
                                                      std::string(sec) + "]]"
                                                : ""));
        continue;
      }
      for (auto&& [key_name, value] : *table) {
        const std::string_view key = key_name.str();
        const std::string name_full = full_name(sec, key);
        if (!find_deck_key(sec, key)) {
          const std::string hint = suggest_key(sec, key);
          add_problem(at(value),
                      fmt::format("{} = {}: expected a known [{}] key, one of {} (unknown key{})",
                                  name_full, show(value), sec, keys_of(sec),
                                  hint.empty() ? "" : "; did you mean " + hint + "?"));
          continue;
        }
        Field& f = fields_.at(name_full);
        if (f.origin.from == From::Override) continue;  // the command line wins
        f.node = &value;
        f.origin = at(value);
      }
    } else if (node.is_table() || node.is_array_of_tables()) {
      const std::string hint = suggest_section(sec);
      add_problem(
          at(node),
          fmt::format("[{}]: expected a known section, one of {} (unknown section{})", sec,
                      section_list(), hint.empty() ? "" : "; did you mean [" + hint + "]?"));
    } else {
      const std::string hint = suggest_any_key(sec);
      add_problem(at(node),
                  fmt::format("{} = {}: expected a key inside a section such as [model]{}", sec,
                              show(node), hint.empty() ? "" : " (did you mean " + hint + "?)"));
    }
  }
}

// ---- typed reads -------------------------------------------------------------------------------

// ">= lo" for sizes (which must still fit in the member), "in [lo, hi]" for explicit ranges.
std::string int_range(const IntRange& r) {
  if (!r.hi) return fmt::format(">= {}", r.lo);
  return fmt::format("in [{}, {}]", r.lo, *r.hi);
}

std::string with_note(std::string text, std::string_view note) {
  if (!note.empty()) text += " " + std::string(note);
  return text;
}

template <class Int>
void DeckReader::read_int(Field& f, const IntRange& r, Int& out) {
  const std::string range = with_note(int_range(r), r.note);
  if (!f.out_of_range.empty()) {
    bad(f, fmt::format("an integer {} ({} is out of the range of a 64-bit integer)", range,
                       f.out_of_range));
    return;
  }
  if (const auto* v = f.node->as_integer()) {
    const std::int64_t x = v->get();
    constexpr auto type_max = std::numeric_limits<Int>::max();
    const std::int64_t top =
        r.hi.value_or(type_max > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
                          ? std::numeric_limits<std::int64_t>::max()
                          : static_cast<std::int64_t>(type_max));
    if (x < r.lo || x > top) {
      std::string text = int_range(r);
      if (x > top && !r.hi) text += fmt::format(" and <= {}", top);
      bad(f, "an integer " + with_note(text, r.note));
      return;
    }
    out = static_cast<Int>(x);
    return;
  }
  std::string got = "got " + type_phrase(*f.node);
  if (const auto* fv = f.node->as_floating_point()) {
    const double x = fv->get();
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9e15)
      got += fmt::format("; write {:.0f} for an integer", x);
  }
  bad(f, "an integer " + range + " (" + got + ")");
}

void DeckReader::read_float(Field& f, const NumberRange& r, double& out) {
  const std::string range = with_note(
      r.hi ? fmt::format("in {}{}, {}{}", r.lo_inclusive ? "[" : "(", plain_number(r.lo), plain_number(*r.hi),
                         r.hi_inclusive ? "]" : ")")
                     : fmt::format("{} {}", r.lo_inclusive ? ">=" : ">", plain_number(r.lo)),
      r.note);
  if (!f.out_of_range.empty()) {
    bad(f, fmt::format("a finite number {} ({} is out of range: not a finite 64-bit "
                       "floating-point number)",
                       range, f.out_of_range));
    return;
  }
  std::optional<double> x;
  if (const auto* v = f.node->as_floating_point()) x = v->get();
  if (const auto* v = f.node->as_integer()) x = static_cast<double>(v->get());
  if (!x) {
    bad(f, "a number " + range + " (got " + type_phrase(*f.node) + ")");
    return;
  }
  const bool in_range = std::isfinite(*x) && (r.lo_inclusive ? *x >= r.lo : *x > r.lo) &&
                        (!r.hi || (r.hi_inclusive ? *x <= *r.hi : *x < *r.hi));
  if (!in_range) {
    bad(f, (std::isfinite(*x) ? "a number " : "a finite number ") + range);
    return;
  }
  out = *x;
}

void DeckReader::read_bool(Field& f, bool& out) {
  if (const auto* v = f.node->as_boolean()) {
    out = v->get();
    return;
  }
  bad(f, "true or false (got " + type_phrase(*f.node) + ")");
}

bool DeckReader::read_string(Field& f, std::string& out) {
  if (const auto* v = f.node->as_string()) {
    out = v->get();
    return true;
  }
  bad(f, "a string (got " + type_phrase(*f.node) + ")");
  return false;
}

void DeckReader::read_choice(Field& f, const Choice& c, std::string& out) {
  std::string s;
  if (!read_string(f, s)) return;
  const auto& values = c.values;
  if (std::find(values.begin(), values.end(), s) != values.end()) {
    out = s;
    return;
  }
  const std::string_view prefix = c.path_prefix;
  if (!prefix.empty() && s.size() > prefix.size() && s.compare(0, prefix.size(), prefix) == 0) {
    out = std::string(prefix) + resolve(s.substr(prefix.size()), f);
    return;
  }
  std::vector<std::string> valid;
  for (std::string_view v : values) valid.push_back(toml_string(v));
  if (!prefix.empty()) valid.push_back(toml_string(std::string(prefix) + "PATH"));
  const std::string valid_text = valid.size() == 1 ? valid[0] : "one of " + join(valid, ", ");
  std::string hint;
  std::size_t best_d = kMaxSuggestDistance + 1;
  for (std::string_view v : values) {
    const std::size_t d = edit_distance(s, v);
    if (d < best_d) best_d = d, hint = toml_string(v);
  }
  // A value given by its start ("cl100k" for "cl100k_base").
  for (std::string_view v : values)
    if (hint.empty() && s.size() >= 3 && v.substr(0, s.size()) == s) hint = toml_string(v);
  bad(f, fmt::format("{}{}", valid_text, hint.empty() ? "" : " (did you mean " + hint + "?)"));
}

// Deck-file paths (and defaults) are relative to the deck's folder; --set paths to the working
// directory. The result is absolute and lexically normal, without a trailing separator.
std::string DeckReader::resolve(const std::string& path, const Field& f) const {
  fs::path p(path);
  if (p.is_relative()) p = (f.origin.from == From::Override ? cwd_ : deck_dir_) / p;
  p = p.lexically_normal();
  if (!p.has_filename() && p.has_relative_path()) p = p.parent_path();
  return p.string();
}

bool DeckReader::read_path(Field& f, const PathRule& r, std::string& out) {
  std::string s;
  if (!read_string(f, s)) return false;
  if (s.find('\0') != std::string::npos) {
    // The operating system would see the path end at the NUL: another file than the one named.
    bad(f, "a path without NUL characters (a file name cannot contain NUL)");
    return false;
  }
  if (s.empty()) {
    if (r.allow_empty) {
      out.clear();
      return true;
    }
    bad(f, "a non-empty path");
    return false;
  }
  out = resolve(s, f);
  return true;
}

void DeckReader::check_data_file(Field& f, const std::string& resolved) {
  const DataPaths paths = expand_data_paths(resolved);
  if (paths.form != DataPaths::Form::file) {
    check_data_set(f, resolved, paths);
    return;
  }
  std::vector<std::string> why;
  std::string problem = regular_file_problem(resolved);
  const std::string ext = fs::path(resolved).extension().string();
  const bool good_extension = ext == ".txt" || ext == ".bin";
  // A cluster deck names files that live on the cluster, and a deck may name a folder of shards
  // that tokenize has not made yet (no extension): checking or planning it elsewhere is fine, as
  // long as nothing else is wrong with the value.
  if (data_files_ == DataFiles::may_be_absent && (good_extension || ext.empty()) &&
      problem == errno_problem(ENOENT)) {
    warnings_.push_back(Problem{f.origin, fmt::format("{} = {}: {} {} (needed by train and eval, not by check "
                                                      "and plan)",
                                                      f.def->name(), show(*f.node), display_path(resolved),
                                                      problem)});
    return;
  }
  if (!problem.empty()) why.push_back(std::move(problem));
  if (!good_extension)
    why.push_back(ext.empty() ? "has no extension" : "ends in " + display_path(ext));
  if (why.empty()) return;
  bad(f, fmt::format("an existing, readable .txt (byte-level tokens) or .bin (llm.c token shard) "
                     "regular file, but {} {}",
                     display_path(resolved), join(why, " and ")));
}

// A folder or a pattern (io/data_paths.hpp): it names at least one file, and each is a readable
// regular .txt or .bin file; the first that is not is named.
void DeckReader::check_data_set(Field& f, const std::string& resolved, const DataPaths& paths) {
  const std::string expected = fmt::format("a {} of readable .txt or .bin token files", form_name(paths.form));
  if (!paths.problem.empty()) {
    if (data_files_ == DataFiles::may_be_absent && paths.absent) {
      warnings_.push_back(Problem{f.origin, fmt::format("{} = {}: {} {} (needed by train and eval, not by check and plan)",
                                                        f.def->name(), show(*f.node), display_path(resolved),
                                                        paths.problem)});
      return;
    }
    bad(f, fmt::format("{}, but {} {}", expected, display_path(resolved), paths.problem));
    return;
  }
  for (const std::string& file : paths.files) {
    std::string problem = regular_file_problem(file);
    std::string ext = fs::path(file).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (problem.empty() && ext != ".txt" && ext != ".bin")
      problem = ext.empty() ? "has no extension" : "ends in " + display_path(ext);
    if (!problem.empty()) {
      bad(f, fmt::format("{}, but {} ({} the {} {}) {}", expected, display_path(file),
                         paths.files.size() == 1 ? "the one file" : fmt::format("one of {} files", paths.files.size()),
                         form_name(paths.form), paths.form == DataPaths::Form::folder ? "holds" : "matches",
                         problem));
      return;
    }
  }
}

// data.train / data.valid (io/data_sources.hpp): a path, or a blend, an array of {path, weight}
// tables. Each entry is checked as a path alone is, and messages name the entry
// ("data.train[1].weight = -1: expected ..."). A one-entry blend is that path (weight 1).
void DeckReader::read_sources(Field& f, const PathRule& r, DataSources& out, bool check_files) {
  const toml::array* entries = f.node->as_array();
  if (!entries) {
    std::string path;
    if (!read_path(f, r, path)) return;
    out = DataSources(path);
    if (check_files && !path.empty()) check_data_file(f, path);
    return;
  }
  if (entries->empty()) {
    bad(f, "a path, or a blend of at least one {path = \"...\", weight = ...} table (got an empty array)");
    return;
  }
  DataSources blend;
  for (std::size_t i = 0; i < entries->size(); ++i) {
    const toml::node& e = *entries->get(i);
    Field entry = f;
    entry.node = &e;
    entry.label = fmt::format("{}[{}]", f.def->name(), i);
    const toml::table* t = e.as_table();
    if (!t) {
      bad(entry, "a table {path = \"...\", weight = ...} (got " + type_phrase(e) + ")");
      f.ok = false;
      continue;
    }
    for (auto&& [key, value] : *t)
      if (key.str() != "path" && key.str() != "weight") {
        Field unknown = entry;
        unknown.node = &value;
        unknown.label = fmt::format("{}.{}", entry.label, key.str());
        bad(unknown, "a key of a blend entry, path or weight (unknown key)");
        f.ok = false;
      }
    DataSource source;
    Field path = entry;
    path.label = entry.label + ".path";
    path.node = t->get("path");
    Field weight = entry;
    weight.label = entry.label + ".weight";
    weight.node = t->get("weight");
    if (!path.node) {
      add_problem(f.origin, fmt::format("{} = {}: expected a table with a path (the entry has none)", entry.label, show(e)));
      f.ok = false;
    } else if (read_path(path, PathRule{false, r.data_file}, source.path) && check_files) {
      check_data_file(path, source.path);
    }
    if (!weight.node) {
      add_problem(f.origin, fmt::format("{} = {}: expected a table with a weight (the entry has none)", entry.label, show(e)));
      f.ok = false;
    } else if (const auto* v = weight.node->as_floating_point(); v || weight.node->as_integer()) {
      source.weight = v ? v->get() : static_cast<double>(weight.node->as_integer()->get());
      // isfinite first: an ordered comparison with NaN raises FE_INVALID (trapped in the tests).
      if (!std::isfinite(source.weight) || source.weight <= 0.0)
        bad(weight, "a finite weight > 0 (each sequence comes from an entry with probability weight / sum of weights)");
    } else {
      bad(weight, "a number > 0 (got " + type_phrase(*weight.node) + ")");
    }
    if (!path.ok || !weight.ok) f.ok = false;
    blend.sources.push_back(std::move(source));
  }
  if (!f.ok) return;
  if (blend.size() == 1) blend.sources.front().weight = 1.0;
  out = std::move(blend);
}

// The key's value as given (its own checks), into its member of `d`; a key not given keeps the
// default already in `d`, resolved when it is a path.
void DeckReader::read_key(const DeckKey& k, Deck& d) {
  Field& f = fields_.at(k.name());
  const bool ignored = k.section == std::string_view("data") && !reads_data_key(k.key);
  if (!f.node) {
    if (std::holds_alternative<Required>(k.default_value) && !ignored) {
      add_problem(Origin{From::Default, source_, 0},
                  fmt::format("{} is required: {}", k.name(), k.doc));
      f.ok = false;
    } else if (k.type() == KeyType::Path) {
      visit_member(d, k, [&](auto& m) {
        if constexpr (std::is_same_v<std::decay_t<decltype(m)>, std::string>) {
          if (!m.empty()) m = resolve(m, f);
        } else if constexpr (std::is_same_v<std::decay_t<decltype(m)>, DataSources>) {
          for (DataSource& e : m.sources) e.path = resolve(e.path, f);
        }
      });
    }
    return;
  }
  visit_member(d, k, [&](auto& m) {
    using Member = std::decay_t<decltype(m)>;
    std::visit(
        [&](const auto& rule) {
          using Rule = std::decay_t<decltype(rule)>;
          if constexpr (std::is_same_v<Rule, IntRange>) {
            if constexpr (std::is_integral_v<Member> && !std::is_same_v<Member, bool>)
              read_int(f, rule, m);
          } else if constexpr (std::is_same_v<Rule, NumberRange>) {
            if constexpr (std::is_same_v<Member, double>) read_float(f, rule, m);
          } else if constexpr (std::is_same_v<Rule, Choice>) {
            if constexpr (std::is_same_v<Member, std::string>) read_choice(f, rule, m);
          } else if constexpr (std::is_same_v<Rule, PathRule>) {
            if constexpr (std::is_same_v<Member, std::string>)
              if (read_path(f, rule, m) && rule.data_file && !m.empty() && !ignored) check_data_file(f, m);
            if constexpr (std::is_same_v<Member, DataSources>) read_sources(f, rule, m, rule.data_file && !ignored);
          } else if constexpr (std::is_same_v<Member, bool>) {
            read_bool(f, m);
          }
        },
        k.rule);
  });
}

// ---- cross-key rules ---------------------------------------------------------------------------

void DeckReader::check_multiple(const Term& dividend, const Term& divisor, std::int64_t a,
                                std::int64_t b, std::string_view why) {
  if (b <= 0 || a % b == 0) return;
  if (weight(*divisor.field) > weight(*dividend.field))
    report_on(divisor, fmt::format("a divisor of {}; {}", mention(dividend, divisor), why));
  else
    report_on(dividend, fmt::format("a multiple of {}; {}", mention(divisor, dividend), why));
}

void DeckReader::check_batch(const Deck& d) {
  const Field& gb = field("training", "global_batch");
  const Field& mb = field("training", "micro_batch");
  const Field& dp = field("parallel", "data");
  if (!gb.ok || !mb.ok || !dp.ok) return;
  const std::int64_t per_step = static_cast<std::int64_t>(d.training.micro_batch) * d.parallel.data;
  if (d.training.global_batch % per_step == 0) return;
  const Term tg{"training.global_batch", std::to_string(d.training.global_batch), &gb};
  const Term tm{"training.micro_batch", std::to_string(d.training.micro_batch), &mb};
  const Term td{"parallel.data", std::to_string(d.parallel.data), &dp};
  constexpr std::string_view why =
      "gradient accumulation steps = global_batch / (micro_batch * data) must be a whole number";
  const Term* subject = &tg;
  if (weight(mb) > weight(*subject->field)) subject = &tm;
  if (weight(dp) > weight(*subject->field)) subject = &td;
  if (subject == &tg) {
    report_on(tg, fmt::format("a multiple of training.micro_batch * parallel.data = {} * {} = {}, "
                              "with {} and {}; {}",
                              d.training.micro_batch, d.parallel.data, per_step, mention(tm, tg),
                              mention(td, tg), why));
  } else {
    const Term& other = subject == &tm ? td : tm;
    report_on(*subject,
              fmt::format("training.micro_batch * parallel.data to divide {}, but {} * {} = {} "
                          "does not, with {}; {}",
                          mention(tg, *subject), d.training.micro_batch, d.parallel.data, per_step,
                          mention(other, *subject), why));
  }
}

// parallel.virtual_stages = v > 1 (interleaved 1F1B, src/schedule/pipeline_schedule.hpp): a pipeline
// to interleave over, v chunks of whole layers on every rank, and micro-batches per step in
// groups of parallel.pipeline (the schedule's rule; reported on parallel.virtual_stages, the
// key that asks for it).
void DeckReader::check_virtual_stages(const Deck& d) {
  if (!field("parallel", "virtual_stages").ok || !field("parallel", "pipeline").ok) return;
  const std::int64_t layers = field("model", "layers").ok ? d.model.layers : 0;
  std::int64_t micro_batches = 0;  // unknown, or not whole (check_batch says so)
  if (field("training", "global_batch").ok && field("training", "micro_batch").ok && field("parallel", "data").ok) {
    const std::int64_t per_step = std::int64_t(d.training.micro_batch) * d.parallel.data;
    if (d.training.global_batch % per_step == 0) micro_batches = d.training.global_batch / per_step;
  }
  for (const rules::Problem& p :
       rules::interleave_problems(layers, d.parallel.pipeline, d.parallel.virtual_stages, micro_batches))
    report(p);
}

// A rule's problem (base/layout_rules.hpp) at its keys' places: a divisibility blamed on the more
// deliberately set of its two keys (check_multiple), a statement on its subject.
void DeckReader::report(const rules::Problem& p) {
  const auto term = [this](const rules::KeyValue& kv) {
    const std::size_t dot = kv.key.find('.');
    return Term{kv.key, kv.value_text(), &field(kv.key.substr(0, dot), kv.key.substr(dot + 1))};
  };
  if (p.divisibility()) return check_multiple(term(p.subject), term(p.divisor), p.subject.value, p.divisor.value, p.why);
  const Term subject = term(p.subject);
  report_on(subject, p.expected_text([&](const rules::KeyValue& kv) { return mention(term(kv), subject); }));
}

// low <= high, reported on the more deliberate of the two. `kind`: "an integer" or "a number".
void DeckReader::check_not_above(const Term& low, const Term& high, std::string_view kind) {
  if (weight(*high.field) > weight(*low.field))
    report_on(high, fmt::format("{} >= {}", kind, mention(low, high)));
  else
    report_on(low, fmt::format("{} <= {}", kind, mention(high, low)));
}

// data.tokenizer = "gpt2": its token ids must fit model.vocab_size, and its two files must be in
// data.tokenizer_dir. A missing file is, like a missing data file, a warning for check and plan.
// A validation file that is also a training file (the same file, by identity: another name, a
// link or a folder that holds it) measures the model on what it trained on.
void DeckReader::check_valid_apart_from_train(const Deck& d) {
  Field& train = field("data", "train");
  Field& valid = field("data", "valid");
  if (!reads_data_key("train") || !reads_data_key("valid") || !train.ok || !valid.ok || !valid.node || d.data.valid.empty() ||
      d.data.train.empty())
    return;
  const auto files_of = [](const DataSources& value) {  // of every entry of a blend
    std::vector<std::string> all;
    for (const DataSource& e : value.sources) {
      const std::vector<std::string> files = expand_data_paths(e.path).files;
      all.insert(all.end(), files.begin(), files.end());
    }
    return all;
  };
  const std::vector<std::string> training = files_of(d.data.train);
  for (const std::string& v : files_of(d.data.valid))
    for (const std::string& t : training) {
      std::error_code ec;
      if (!fs::equivalent(v, t, ec) || ec) continue;
      bad(valid, fmt::format("validation data apart from the training data, but {} is also {} (data.train = {}, {}): "
                             "the evaluation would measure the model on tokens it trained on",
                             display_path(v), v == t ? "a training file" : "training file " + display_path(t),
                             d.data.train.is_blend() ? d.data.train.text() : display_path(d.data.train.sources[0].path),
                             where(train)));
      return;
    }
}

// Context parallelism (parallel.context = C > 1, src/model/ring_attention.hpp) cuts every sequence
// into 2C chunks and runs flash attention per block of the ring; what it does not run yet is
// refused here, on parallel.context.
void DeckReader::check_context(const Deck& d) {
  Field& cp = field("parallel", "context");
  if (!cp.ok || d.parallel.context <= 1) return;
  const int C = d.parallel.context;
  if (field("model", "seq_length").ok)
    for (const rules::Problem& p : rules::context_problems(d.model.seq_length, C)) report(p);
  if (field("training", "attention").ok && d.training.attention == "batched")
    bad(cp, fmt::format("1 with training.attention = \"batched\" ({}): ring attention runs flash attention per "
                        "block (set training.attention = \"flash\" or \"default\")",
                        where(field("training", "attention"))));
  if (field("training", "tasks").ok && !d.training.tasks.empty())
    bad(cp, fmt::format("1 with training.tasks ({}): multiple-choice scoring runs without context parallelism "
                        "(score the checkpoints with tptrain eval --tasks --set parallel.context=1)",
                        where(field("training", "tasks"))));
}

// Documents in packed sequences start at the tokenizer's end-of-text token; flash attention alone
// has the document mask.
void DeckReader::check_documents(const Deck& d) {
  Field& tokenizer = field("data", "tokenizer");
  for (const char* key : {"document_mask", "reset_positions"}) {
    Field& f = field("data", key);
    const bool on = std::string(key) == "document_mask" ? d.data.document_mask : d.data.reset_positions;
    if (!on || !f.ok || !tokenizer.ok || d.data.tokenizer != "bytes") continue;
    bad(f, fmt::format("false with data.tokenizer = \"{}\" ({}): documents start at <|endoftext|>, which byte-level "
                       "tokens do not have",
                       d.data.tokenizer, where(tokenizer)));
  }
}

// data.tokenizer_pattern goes with "tiktoken:PATH", which needs it.
void DeckReader::check_tokenizer_pattern(const Deck& d) {
  Field& tokenizer = field("data", "tokenizer");
  Field& pattern = field("data", "tokenizer_pattern");
  if (!tokenizer.ok || !pattern.ok) return;
  const bool rank_file = !text::tiktoken_file_of(d.data.tokenizer).empty();
  if (rank_file && d.data.tokenizer_pattern.empty())
    bad(tokenizer, "a tokenizer with its pre-tokenization pattern: a tiktoken rank file needs data.tokenizer_pattern = "
                   "\"cl100k\", \"o200k\" or \"llama3\" (Llama 3's tokenizer.model: \"llama3\")");
  if (!rank_file && !d.data.tokenizer_pattern.empty())
    bad(pattern, fmt::format("\"\" with data.tokenizer = \"{}\" ({}), which has its own pattern: a pattern goes with "
                             "\"tiktoken:PATH\" only",
                             d.data.tokenizer, where(tokenizer)));
}

// The token ids of data.tokenizer must fit model.vocab_size, and its files (GPT-2's two, a
// tiktoken rank file) must be readable. A missing file is, like a missing data file, a warning
// for check and plan.
void DeckReader::check_tokenizer(const Deck& d) {
  Field& tokenizer = field("data", "tokenizer");
  Field& dir = field("data", "tokenizer_dir");
  Field& pattern = field("data", "tokenizer_pattern");
  if (d.data.tokenizer == "bytes" || !tokenizer.ok || !dir.ok || !pattern.ok) return;
  const bool gpt2 = d.data.tokenizer == "gpt2";
  const bool rank_file = !text::tiktoken_file_of(d.data.tokenizer).empty();
  if (rank_file && d.data.tokenizer_pattern.empty()) return;  // check_tokenizer_pattern said so
  std::string folder;
  std::vector<std::string> paths;
  try {
    if (gpt2) {
      folder = text::gpt2_dir_or_default(d.data.tokenizer_dir);
      if (!folder.empty()) paths = text::gpt2_file_paths(folder);
    } else if (rank_file) {
      paths = {text::tiktoken_ranks_path(d.data.tokenizer, {})};
    } else {
      folder = d.data.tokenizer_dir.empty() ? text::default_tiktoken_dir() : d.data.tokenizer_dir;
      if (!folder.empty()) paths = {text::tiktoken_ranks_path(d.data.tokenizer, folder)};
    }
  } catch (const std::exception& e) {
    bad(tokenizer, e.what());
    return;
  }
  Field& subject = dir.node && !rank_file ? dir : tokenizer;
  // The ids: known for the named tokenizers, counted in the file for a rank file that is there.
  std::optional<std::size_t> ids;
  if (gpt2) ids = text::kGpt2VocabSize;
  if (const auto ranks = text::named_tiktoken_ranks(d.data.tokenizer))
    ids = text::tiktoken_encoding(d.data.tokenizer, {}, folder, *ranks).vocab_size;
  if (rank_file && regular_file_problem(paths[0]).empty()) {
    try {
      ids = text::tiktoken_encoding(d.data.tokenizer, d.data.tokenizer_pattern, {},
                                    text::count_tiktoken_ranks(paths[0])).vocab_size;
    } catch (const std::exception& e) {
      bad(tokenizer, e.what());
      return;
    }
  }
  if (Field& vocab = field("model", "vocab_size"); ids && vocab.ok && static_cast<std::size_t>(d.model.vocab_size) < *ids) {
    const Term tv{"model.vocab_size", std::to_string(d.model.vocab_size), &vocab};
    const Term tt{"data.tokenizer", toml_string(d.data.tokenizer), &tokenizer};
    if (weight(tokenizer) > weight(vocab))
      report_on(tt, fmt::format("a tokenizer whose tokens fit {}; {} has {} (ids 0..{})", mention(tv, tt),
                                toml_string(d.data.tokenizer), *ids, *ids - 1));
    else
      report_on(tv, fmt::format("an integer >= {} with {}: its tokens are 0..{}", *ids, mention(tt, tv), *ids - 1));
  }
  if (data_files_ == DataFiles::ignored) return;
  const std::string what = gpt2 ? "GPT-2's encoder.json and vocab.bpe"
                           : rank_file ? "the tiktoken rank file"
                                       : d.data.tokenizer + "'s rank file " + d.data.tokenizer + ".tiktoken";
  const std::string hint = gpt2 ? text::gpt2_files_hint() : rank_file ? std::string() : text::tiktoken_files_hint();
  if (!rank_file && folder.empty()) {
    bad(subject, "a folder for " + what + ", but neither XDG_CACHE_HOME nor HOME is set: set data.tokenizer_dir");
    return;
  }
  std::vector<std::string> why;
  bool all_absent = true;
  for (const std::string& path : paths)
    if (std::string problem = regular_file_problem(path); !problem.empty()) {
      all_absent = all_absent && problem == errno_problem(ENOENT);
      why.push_back(display_path(path) + " " + problem);
    }
  if (why.empty()) return;
  const std::string expected =
      rank_file ? fmt::format("{}, but {}", what, join(why, " and "))
                : fmt::format("{} in {}, but {}; {}{}", what,
                              dir.node ? "that folder" : "data.tokenizer_dir (default " + display_path(folder) + ")",
                              join(why, " and "), hint, dir.node ? "" : ", or set data.tokenizer_dir");
  if (data_files_ == DataFiles::may_be_absent && all_absent) {
    warnings_.push_back(Problem{subject.origin, fmt::format("{} = {}: {} (needed by train, eval and generate, not by "
                                                            "check and plan)",
                                                            subject.def->name(), show(*subject.node), expected)});
    return;
  }
  bad(subject, expected);
}

// ---- assembling the Deck -----------------------------------------------------------------------

Deck DeckReader::build() {
  Deck d;  // every key at its default
  d.source = source_;
  for (const DeckKey& k : deck_keys()) read_key(k, d);

  // Defaults derived from other keys' values.
  model::ModelShape& m = d.model;
  Field& ffn = field("model", "ffn_hidden");
  if (!ffn.node) {
    ffn.default_note = "4 * model.hidden";
    const std::int64_t f4 = 4 * static_cast<std::int64_t>(m.hidden);
    if (f4 > kIntMax) {
      Field& h = field("model", "hidden");
      h.ok = false;
      ffn.ok = false;
      add_problem(h.origin, fmt::format("model.hidden = {}: expected 4 * model.hidden (the default "
                                        "model.ffn_hidden) <= {}; set model.ffn_hidden",
                                        m.hidden, kIntMax));
    } else {
      m.ffn_hidden = static_cast<int>(f4);
    }
  }
  if (Field& kv = field("model", "kv_heads"); !kv.node) {
    kv.default_note = "model.heads";
    m.kv_heads = m.heads;
  }
  // The block specification's choices the deck leaves out: the preset's (src/model/spec/block_spec.hpp).
  const model::BlockPreset* preset =
      field("model", "architecture").ok ? model::block_preset(m.architecture) : nullptr;
  if (preset != nullptr) {
    for (const model::PresetChoice& k : model::preset_choices())
      if (Field& f = field("model", k.key); !f.node) {
        f.default_note = "of model.architecture = \"" + m.architecture + "\"";
        k.take(m, preset->spec);
      }
    model::take_preset_fixed(m, preset->spec);
  }
  OptimizerConfig& o = d.optimizer;
  if (Field& min_lr = field("optimizer", "min_lr"); !min_lr.node) {
    o.min_lr = round_decimal(o.lr / 10);  // 10 % of the peak (GPT-3), whatever lr is
    min_lr.default_note = "optimizer.lr / 10";
  }
  // optimizer.distributed = true is optimizer.shard = "optimizer"'s older spelling. When both
  // are given and disagree, a --set wins over the file (input/tiny.toml writes both); two of the
  // same weight are refused.
  if (Field& shard = field("optimizer", "shard"); !shard.node) {
    o.shard = o.distributed ? "optimizer" : "none";
    shard.default_note = o.distributed ? "of optimizer.distributed = true" : "";
  } else if (Field& distributed = field("optimizer", "distributed");
             distributed.node && distributed.ok && shard.ok && o.distributed != (o.shard != "none")) {
    if (weight(distributed) > weight(shard))
      o.shard = o.distributed ? "optimizer" : "none";
    else if (weight(distributed) == weight(shard))
      report_on(Term{"optimizer.distributed", o.distributed ? "true" : "false", &distributed},
                fmt::format("{} with optimizer.shard = \"{}\" ({}): leave optimizer.distributed out",
                            o.shard != "none" ? "true" : "false", o.shard, where(shard)));
  }
  o.distributed = o.shard != "none";
  if (!field("checkpoint", "dir").node)
    d.checkpoint.dir = (fs::path(d.run.dir) / "checkpoints").string();
  const ParallelConfig& p = d.parallel;
  const TrainingConfig& t = d.training;

  // Cross-key rules, only between values that passed their own checks.
  auto term = [this](std::string_view section, std::string_view key, std::int64_t v) {
    return Term{full_name(section, key), std::to_string(v), &field(section, key)};
  };
  auto ok = [this](std::string_view section, std::string_view key) {
    return field(section, key).ok;
  };
  // The layout's rules (base/layout_rules.hpp), asked only with the values that passed their own
  // checks (0: not known).
  const auto known = [&ok](std::string_view section, std::string_view key, std::int64_t v) -> std::int64_t {
    return ok(section, key) ? v : 0;
  };
  for (const rules::Problem& q : rules::head_problems(known("model", "hidden", m.hidden), known("model", "heads", m.heads)))
    report(q);
  const std::int64_t tensor = known("parallel", "tensor", p.tensor);
  for (const rules::Problem& q : rules::tensor_split_problems(known("model", "heads", m.heads), 0, tensor)) report(q);
  check_architecture(d);
  if (ok("model", "hidden"))
    for (const rules::Problem& q : rules::tensor_split_problems(0, known("model", "ffn_hidden", m.ffn_hidden), tensor,
                                                                 known("model", "moe_ffn_hidden", m.moe_ffn_hidden)))
      report(q);
  for (const rules::Problem& q :
       rules::pipeline_problems(known("model", "layers", m.layers), known("parallel", "pipeline", p.pipeline)))
    report(q);
  check_virtual_stages(d);
  for (const rules::Problem& q :
       rules::sequence_parallel_problems(known("model", "seq_length", m.seq_length),
                                         known("parallel", "context", p.context), tensor, p.sequence_parallel))
    report(q);
  check_batch(d);
  check_tokenizer_pattern(d);
  check_tokenizer(d);
  check_documents(d);
  check_context(d);
  check_experts(d);
  check_shard_group(d);
  check_valid_apart_from_train(d);
  if (ok("parallel", "tensor") && ok("parallel", "pipeline") && ok("parallel", "data") && ok("parallel", "context")) {
    const std::int64_t world = static_cast<std::int64_t>(p.tensor) * p.context * p.pipeline * p.data;
    if (world > kIntMax) {
      const Term tt = term("parallel", "tensor", p.tensor),
                 tp = term("parallel", "pipeline", p.pipeline),
                 td = term("parallel", "data", p.data);
      const Term* s = &tt;
      if (weight(*tp.field) > weight(*s->field)) s = &tp;
      if (weight(*td.field) > weight(*s->field)) s = &td;
      report_on(*s, fmt::format("parallel.tensor * parallel.context * parallel.pipeline * parallel.data = {} ranks "
                                "to be <= {}",
                                world, kIntMax));
    }
  }
  if (ok("optimizer", "warmup_steps") && ok("training", "steps") && o.warmup_steps > t.steps)
    check_not_above(term("optimizer", "warmup_steps", o.warmup_steps),
                    term("training", "steps", t.steps), "an integer");
  if (ok("optimizer", "min_lr") && ok("optimizer", "lr") && o.min_lr > o.lr)
    check_not_above(Term{"optimizer.min_lr", toml_float(o.min_lr), &field("optimizer", "min_lr")},
                    Term{"optimizer.lr", toml_float(o.lr), &field("optimizer", "lr")}, "a number");
  if (ok("training", "loss_scale_min") && ok("training", "loss_scale_initial") &&
      t.loss_scale_min > t.loss_scale_initial)
    check_not_above(Term{"training.loss_scale_min", toml_float(t.loss_scale_min),
                         &field("training", "loss_scale_min")},
                    Term{"training.loss_scale_initial", toml_float(t.loss_scale_initial),
                         &field("training", "loss_scale_initial")},
                    "a number");
  check_tensor_core_shapes(d);
  return d;
}

// The block specification's rules: grouped-query attention's kv_heads (whole key/value heads per
// tensor rank; the layout's rule), then the rules of the kinds it chooses, each kind's own
// (src/model/spec/sublayer_kinds.hpp: LayerNorm's bias, rotary embeddings' even head dimension,
// the mixture of experts' k <= E and bias-free experts), and the keys of the kinds it does not
// choose left out or at their defaults (a resolved deck lists every key at its default and must
// load again).
void DeckReader::check_architecture(const Deck& d) {
  const model::ModelShape& m = d.model;
  const auto ok = [this](std::string_view key) { return field("model", key).ok; };
  // Without a preset the choices left out have no value to check against: the architecture's
  // own problem is the one to report.
  if (!ok("architecture")) return;
  // Grouped-query attention's rule is the layout's (base/layout_rules.hpp); the tensor half
  // needs a valid parallel.tensor.
  if (ok("kv_heads") && ok("heads"))
    for (const rules::Problem& p : rules::kv_head_problems(m.heads, m.kv_heads, field("parallel", "tensor").ok ? d.parallel.tensor : 1))
      report(p);
  // Each chosen kind's rules once its slot's key, its keys and the keys it binds are valid (a
  // slot's key is valid once its value is one of the registry's kinds).
  bool slots_ok = true;
  for (const model::SublayerSlot slot : model::kSublayerSlots) {
    if (!ok(model::slot_key(slot))) {
      slots_ok = false;
      continue;
    }
    const model::SublayerKind& kind = model::kind_in(slot, m);
    bool kind_ok = true;
    for (const model::KindKey& k : kind.keys) kind_ok = kind_ok && field(k.section, k.key).ok;
    for (const char* key : kind.binds) kind_ok = kind_ok && ok(key);
    if (kind_ok && kind.problems != nullptr)
      for (const rules::Problem& p : kind.problems(m)) report(p);
  }
  if (!slots_ok) return;
  for (const rules::Problem& p : model::unchosen_key_problems(m)) {
    const std::string& key = p.subject.key;  // "model.experts", "training.moe_aux_loss_coeff"
    if (field(key.substr(0, key.find('.')), key.substr(key.find('.') + 1)).ok) report(p);
  }
}

// Expert parallelism's layout rule (base/layout_rules.hpp: a mixture of experts, parallel.expert
// dividing parallel.data and model.experts), each half once its keys are valid.
void DeckReader::check_experts(const Deck& d) {
  if (!field("model", "mlp").ok) return;
  if (field("parallel", "expert").ok)
    for (const rules::Problem& p :
         rules::expert_problems(model::holds_experts(d.model), field("model", "experts").ok ? d.model.experts : 0,
                                d.parallel.expert, field("parallel", "data").ok ? d.parallel.data : 0))
      report(p);
}

// Hybrid sharding: parallel.shard_group divides data x context, shards something to be hybrid
// over, and leaves a mixture's experts alone (their shards span the expert-data group).
void DeckReader::check_shard_group(const Deck& d) {
  const int g = d.parallel.shard_group;
  if (!field("parallel", "shard_group").ok || g == 0) return;
  const Term term{"parallel.shard_group", std::to_string(g), &field("parallel", "shard_group")};
  if (field("parallel", "data").ok && field("parallel", "context").ok &&
      (std::int64_t(d.parallel.data) * d.parallel.context) % g != 0)
    report_on(term, fmt::format("a divisor of parallel.data x parallel.context = {} x {} = {}", d.parallel.data,
                                d.parallel.context, std::int64_t(d.parallel.data) * d.parallel.context));
  else if (field("optimizer", "shard").ok && d.optimizer.shard == "none")
    report_on(term, fmt::format("0 with optimizer.shard = \"none\" ({}): there is nothing to shard over the group",
                                where(field("optimizer", "shard"))));
  else if (field("model", "mlp").ok && model::holds_experts(d.model))
    report_on(term, "0 with a mixture of experts (model.mlp = \"moe\"): hybrid sharding of experts is not supported");
}

// Tensor cores (and the CPU BLAS kernels' vector lanes) take GEMM dimensions in multiples of 8;
// other widths still train, slower: a warning for check and plan, not an error.
void DeckReader::check_tensor_core_shapes(const Deck& d) {
  const model::ModelShape& m = d.model;
  const auto warn = [this](std::string_view key, const std::string& what, std::int64_t value) {
    Field& f = field("model", key);
    warnings_.push_back(Problem{f.origin, fmt::format("{} = {} is not a multiple of 8: GEMMs over it miss "
                                                      "the tensor-core shapes (it trains, more slowly)",
                                                      what, value)});
  };
  const auto ok = [this](std::string_view key) { return field("model", key).ok; };
  if (ok("hidden") && m.hidden % 8 != 0) warn("hidden", "model.hidden", m.hidden);
  if (ok("ffn_hidden") && ok("hidden") && m.ffn_hidden % 8 != 0) warn("ffn_hidden", "model.ffn_hidden", m.ffn_hidden);
  if (ok("hidden") && ok("heads") && m.hidden % m.heads == 0 && m.head_dim() % 8 != 0)
    warn("heads", "the head dimension model.hidden / model.heads", m.head_dim());
}

void DeckReader::throw_if_problems() {
  if (problems_.empty()) return;
  // File problems in line order, then --set problems in command-line order, then the rest.
  std::stable_sort(problems_.begin(), problems_.end(), [](const Problem& a, const Problem& b) {
    if (a.origin.from != b.origin.from) return a.origin.from < b.origin.from;
    return a.origin.order < b.origin.order;
  });
  std::vector<std::string> lines;
  lines.reserve(problems_.size());
  for (const Problem& p : problems_) lines.push_back(p.origin.where + ": " + p.text);
  throw DeckError(std::move(lines));
}

Deck parse_impl(std::optional<std::string_view> text, const std::string& read_error,
                const std::string& source_name, const std::string& base_dir,
                const std::vector<std::string>& overrides, DataFiles data_files,
                std::vector<std::string>* warnings = nullptr) {
  DeckReader reader(source_name, base_dir, data_files);
  reader.apply_overrides(overrides);
  if (!text) {
    reader.add_problem(Origin{From::Default, source_name, 0}, read_error);
  } else if (reader.parse_text(*text)) {
    reader.scan_file();
    Deck deck = reader.build();
    reader.throw_if_problems();
    if (warnings) *warnings = reader.warnings();
    return deck;
  }
  reader.throw_if_problems();
  throw DeckError({source_name + ": cannot load deck"});  // not reached
}

}  // namespace

// ---- public entry points -----------------------------------------------------------------------

Deck parse_deck(std::string_view toml_text, const std::string& source_name,
                const std::string& base_dir, const std::vector<std::string>& overrides,
                DataFiles data_files) {
  return parse_impl(toml_text, {}, source_name, base_dir, overrides, data_files);
}

Deck load_deck(const std::string& path, const std::vector<std::string>& overrides, DataFiles data_files,
               std::vector<std::string>* warnings) {
  if (path.empty())
    return parse_impl(std::nullopt, "cannot read deck file: no path given", "<deck>", {},
                      overrides, data_files);
  const std::string base_dir = fs::absolute(fs::path(path)).parent_path().string();
  std::string text;
  const std::string problem = read_regular_file(path, kMaxDeckBytes, text);
  if (problem.empty())
    return parse_impl(std::string_view{text}, {}, path, base_dir, overrides, data_files, warnings);
  return parse_impl(std::nullopt, "cannot read deck file: it " + problem, display_path(path),
                    base_dir, overrides, data_files);
}

}  // namespace tptrain::io
