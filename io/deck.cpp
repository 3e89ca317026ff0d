// Input deck: parse (toml++), apply --set overrides, validate everything, resolve paths.
// See io/deck.hpp for the contract and docs/deck-reference.md for every key.
#include "io/deck.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>

namespace tptrain::io {

// ---- small accessors -------------------------------------------------------------------------

int ModelConfig::head_dim() const { return heads > 0 ? hidden / heads : 0; }
int ModelConfig::ffn_width() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
int ParallelConfig::world_size() const { return tensor * pipeline * data; }
int Deck::grad_accum_steps() const {
  const int per_step = training.micro_batch * parallel.data;
  return per_step > 0 ? training.global_batch / per_step : 0;
}

bool operator==(const ModelConfig& a, const ModelConfig& b) {
  return a.layers == b.layers && a.hidden == b.hidden && a.heads == b.heads &&
         a.ffn_width() == b.ffn_width() && a.seq_length == b.seq_length &&
         a.vocab_size == b.vocab_size;
}
bool operator==(const ParallelConfig& a, const ParallelConfig& b) {
  return a.tensor == b.tensor && a.pipeline == b.pipeline && a.data == b.data;
}
bool operator==(const TrainingConfig& a, const TrainingConfig& b) {
  return a.global_batch == b.global_batch && a.micro_batch == b.micro_batch && a.steps == b.steps &&
         a.seed == b.seed && a.precision == b.precision && a.grad_clip == b.grad_clip &&
         a.log_interval == b.log_interval && a.eval_interval == b.eval_interval &&
         a.eval_windows == b.eval_windows;
}
bool operator==(const OptimizerConfig& a, const OptimizerConfig& b) {
  return a.lr == b.lr && a.min_lr == b.min_lr && a.warmup_steps == b.warmup_steps &&
         a.decay == b.decay && a.weight_decay == b.weight_decay && a.beta1 == b.beta1 &&
         a.beta2 == b.beta2 && a.eps == b.eps;
}
bool operator==(const DataConfig& a, const DataConfig& b) {
  return a.train == b.train && a.valid == b.valid;
}
bool operator==(const CheckpointConfig& a, const CheckpointConfig& b) {
  return a.dir == b.dir && a.interval == b.interval && a.keep == b.keep && a.resume == b.resume;
}
bool operator==(const RunConfig& a, const RunConfig& b) { return a.dir == b.dir; }
bool operator==(const Deck& a, const Deck& b) {
  return a.model == b.model && a.parallel == b.parallel && a.training == b.training &&
         a.optimizer == b.optimizer && a.data == b.data && a.checkpoint == b.checkpoint &&
         a.run == b.run;
}

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

// ---- the schema --------------------------------------------------------------------------------

enum class Type { Integer, Float, String, Boolean };

struct KeyDef {
  std::string_view section;
  std::string_view key;
  Type type;
};

// DESIGN.md order; to_toml() and the reference follow it.
constexpr std::string_view kSectionOrder[] = {"model", "parallel",   "training", "optimizer",
                                              "data",  "checkpoint", "run"};
constexpr KeyDef kKeys[] = {
    {"model", "layers", Type::Integer},
    {"model", "hidden", Type::Integer},
    {"model", "heads", Type::Integer},
    {"model", "ffn_hidden", Type::Integer},
    {"model", "seq_length", Type::Integer},
    {"model", "vocab_size", Type::Integer},
    {"parallel", "tensor", Type::Integer},
    {"parallel", "pipeline", Type::Integer},
    {"parallel", "data", Type::Integer},
    {"training", "global_batch", Type::Integer},
    {"training", "micro_batch", Type::Integer},
    {"training", "steps", Type::Integer},
    {"training", "seed", Type::Integer},
    {"training", "precision", Type::String},
    {"training", "grad_clip", Type::Float},
    {"training", "log_interval", Type::Integer},
    {"training", "eval_interval", Type::Integer},
    {"training", "eval_windows", Type::Integer},
    {"optimizer", "lr", Type::Float},
    {"optimizer", "min_lr", Type::Float},
    {"optimizer", "warmup_steps", Type::Integer},
    {"optimizer", "decay", Type::String},
    {"optimizer", "weight_decay", Type::Float},
    {"optimizer", "beta1", Type::Float},
    {"optimizer", "beta2", Type::Float},
    {"optimizer", "eps", Type::Float},
    {"data", "train", Type::String},
    {"data", "valid", Type::String},
    {"checkpoint", "dir", Type::String},
    {"checkpoint", "interval", Type::Integer},
    {"checkpoint", "keep", Type::Integer},
    {"checkpoint", "resume", Type::Boolean},
    {"run", "dir", Type::String},
};

bool is_section(std::string_view s) {
  return std::find(std::begin(kSectionOrder), std::end(kSectionOrder), s) !=
         std::end(kSectionOrder);
}

const KeyDef* find_key(std::string_view section, std::string_view key) {
  for (const KeyDef& k : kKeys)
    if (k.section == section && k.key == key) return &k;
  return nullptr;
}

std::string full_name(std::string_view section, std::string_view key) {
  return std::string(section) + "." + std::string(key);
}

std::string keys_of(std::string_view section) {
  std::vector<std::string> names;
  for (const KeyDef& k : kKeys)
    if (k.section == section) names.emplace_back(k.key);
  return join(names, ", ");
}

std::string section_list() {
  std::vector<std::string> names;
  for (std::string_view s : kSectionOrder) names.push_back("[" + std::string(s) + "]");
  return join(names, ", ");
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

// Closest valid key for an unknown `section.key`: same section first (distance <= 2), then the
// same name in another section (a key put in the wrong section). "" when nothing is close.
std::string suggest_key(std::string_view section, std::string_view key) {
  std::string best;
  std::size_t best_d = kMaxSuggestDistance + 1;
  for (const KeyDef& k : kKeys) {
    if (k.section != section) continue;
    const std::size_t d = edit_distance(key, k.key);
    if (d < best_d) best_d = d, best = full_name(k.section, k.key);
  }
  if (!best.empty()) return best;
  for (const KeyDef& k : kKeys)
    if (edit_distance(key, k.key) == 0) return full_name(k.section, k.key);
  return {};
}

// For a key written outside any section (or a --set without a section).
std::string suggest_any_key(std::string_view key) {
  std::string best;
  std::size_t best_d = kMaxSuggestDistance + 1;
  for (const KeyDef& k : kKeys) {
    const std::size_t d = edit_distance(key, k.key);
    if (d < best_d) best_d = d, best = full_name(k.section, k.key);
  }
  return best;
}

std::string suggest_section(std::string_view section) {
  std::string best;
  std::size_t best_d = kMaxSuggestDistance + 1;
  for (std::string_view s : kSectionOrder) {
    const std::size_t d = edit_distance(section, s);
    if (d < best_d) best_d = d, best = std::string(s);
  }
  return best;
}

// ---- showing values ----------------------------------------------------------------------------

// TOML float text that reads back to the same double (fmt's shortest round-trip form), always
// recognisable as a float: 1.0 not 1.
std::string toml_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// `v` to 15 significant decimal digits, so that a derived value is the double its decimal text
// names (3e-3 / 10 is 3.0000000000000003e-4 in binary; this gives 3e-4).
double round_decimal(double v) {
  if (!std::isfinite(v)) return v;
  const std::string text = fmt::format("{:.15g}", v);
  double out = v;
  std::from_chars(text.data(), text.data() + text.size(), out);
  return out;
}

// A number inside a sentence ("expected a number > 0"): no forced ".0".
std::string plain_number(double v) { return fmt::format("{}", v); }

// TOML basic string: double quotes, escapes for backslash, quote and control characters.
std::string toml_string(std::string_view s) {
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
  const KeyDef* def = nullptr;
  const toml::node* node = nullptr;  // nullptr: not given, the default applies
  Origin origin;
  bool ok = true;            // the given value passed its own checks (or is the default)
  std::string default_note;  // how the default was derived, for messages ("4 * model.hidden")
};

// A term in a cross-key rule (divisibility, ordering).
struct Term {
  std::string name;   // section.key
  std::string value;  // as shown
  const Field* field;
};

class DeckReader {
 public:
  DeckReader(std::string source, const std::string& base_dir)
      : source_(std::move(source)), cwd_(fs::current_path()) {
    deck_dir_ = base_dir.empty() ? cwd_ : fs::absolute(fs::path(base_dir)).lexically_normal();
    for (const KeyDef& k : kKeys) {
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

 private:
  Field& field(std::string_view section, std::string_view key) {
    return fields_.at(full_name(section, key));
  }
  void bad(Field& f, const std::string& expected) {
    f.ok = false;
    add_problem(f.origin, fmt::format("{} = {}: expected {}", full_name(f.def->section, f.def->key),
                                      show(*f.node), expected));
  }

  void read_int(std::string_view section, std::string_view key, int& out, std::int64_t lo,
                std::optional<std::int64_t> hi = std::nullopt, std::string_view note = {});
  void read_seed(std::uint64_t& out);
  void read_float(std::string_view section, std::string_view key, double& out, double lo,
                  bool lo_inclusive, std::optional<double> hi_exclusive = std::nullopt,
                  std::string_view note = {});
  void read_bool(std::string_view section, std::string_view key, bool& out);
  bool read_string(std::string_view section, std::string_view key, std::string& out);
  void read_choice(std::string_view section, std::string_view key, std::string& out,
                   const std::vector<std::string_view>& implemented,
                   const std::vector<std::string_view>& planned);
  bool read_path(std::string_view section, std::string_view key, std::string& out,
                 bool allow_empty);
  std::string resolve(const std::string& path, const Field& f) const;
  void check_data_file(std::string_view key, const std::string& resolved);

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

  std::string source_;
  fs::path cwd_;
  fs::path deck_dir_;
  toml::table file_;
  std::vector<std::unique_ptr<toml::table>> override_values_;
  std::map<std::string, Field> fields_;
  std::vector<Problem> problems_;
};

// ---- overrides ---------------------------------------------------------------------------------

void DeckReader::apply_overrides(const std::vector<std::string>& overrides) {
  for (std::size_t i = 0; i < overrides.size(); ++i) {
    const std::string& text = overrides[i];
    Origin origin{From::Override, "--set " + text, i};
    const auto eq = text.find('=');
    if (eq == std::string::npos) {
      add_problem(origin, "expected section.key=value (no '=' found)");
      continue;
    }
    const std::string lhs = trim(std::string_view(text).substr(0, eq));
    const std::string rhs = trim(std::string_view(text).substr(eq + 1));
    const auto dot = lhs.find('.');
    if (dot == std::string::npos || dot == 0) {
      const std::string hint = suggest_any_key(dot == 0 ? lhs.substr(1) : lhs);
      add_problem(origin, fmt::format("expected section.key=value, but '{}' names no section{}",
                                      lhs, hint.empty() ? "" : " (did you mean " + hint + "?)"));
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
    const KeyDef* def = find_key(section, key);
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
        parsed = def->type != Type::String || t.get("v")->is_string();
        if (parsed) *holder = std::move(t);
      }
    } catch (const toml::parse_error&) {
      parsed = false;
    }
    if (!parsed) holder->insert_or_assign("v", rhs);
    Field& f = fields_.at(lhs);
    f.node = holder->get("v");
    f.origin = origin;
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
        if (!find_key(sec, key)) {
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

// ">= lo" for sizes (which must still fit in an int), "in [lo, hi]" for explicit ranges.
std::string int_range(std::int64_t lo, std::optional<std::int64_t> hi) {
  if (!hi) return fmt::format(">= {}", lo);
  return fmt::format("in [{}, {}]", lo, *hi);
}

void DeckReader::read_int(std::string_view section, std::string_view key, int& out, std::int64_t lo,
                          std::optional<std::int64_t> hi, std::string_view note) {
  Field& f = field(section, key);
  if (!f.node) return;
  const std::string suffix = note.empty() ? "" : " " + std::string(note);
  if (const auto* v = f.node->as_integer()) {
    const std::int64_t x = v->get();
    const std::int64_t top = hi.value_or(kIntMax);
    if (x < lo || x > top) {
      std::string range = int_range(lo, hi);
      if (x > top && !hi) range += fmt::format(" and <= {}", top);
      bad(f, "an integer " + range + suffix);
      return;
    }
    out = static_cast<int>(x);
    return;
  }
  std::string got = "got " + type_phrase(*f.node);
  if (const auto* fv = f.node->as_floating_point()) {
    const double x = fv->get();
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9e15)
      got += fmt::format("; write {:.0f} for an integer", x);
  }
  bad(f, "an integer " + int_range(lo, hi) + suffix + " (" + got + ")");
}

void DeckReader::read_seed(std::uint64_t& out) {
  Field& f = field("training", "seed");
  if (!f.node) return;
  if (const auto* v = f.node->as_integer(); v && v->get() >= 0) {
    out = static_cast<std::uint64_t>(v->get());
    return;
  }
  bad(f, "a non-negative integer" +
             (f.node->is_integer() ? std::string() : " (got " + type_phrase(*f.node) + ")"));
}

void DeckReader::read_float(std::string_view section, std::string_view key, double& out, double lo,
                            bool lo_inclusive, std::optional<double> hi_exclusive,
                            std::string_view note) {
  Field& f = field(section, key);
  if (!f.node) return;
  std::string range = hi_exclusive
                          ? fmt::format("in {}{}, {})", lo_inclusive ? "[" : "(", plain_number(lo),
                                        plain_number(*hi_exclusive))
                          : fmt::format("{} {}", lo_inclusive ? ">=" : ">", plain_number(lo));
  if (!note.empty()) range += " " + std::string(note);
  std::optional<double> x;
  if (const auto* v = f.node->as_floating_point()) x = v->get();
  if (const auto* v = f.node->as_integer()) x = static_cast<double>(v->get());
  if (!x) {
    bad(f, "a number " + range + " (got " + type_phrase(*f.node) + ")");
    return;
  }
  const bool in_range = std::isfinite(*x) && (lo_inclusive ? *x >= lo : *x > lo) &&
                        (!hi_exclusive || *x < *hi_exclusive);
  if (!in_range) {
    bad(f, (std::isfinite(*x) ? "a number " : "a finite number ") + range);
    return;
  }
  out = *x;
}

void DeckReader::read_bool(std::string_view section, std::string_view key, bool& out) {
  Field& f = field(section, key);
  if (!f.node) return;
  if (const auto* v = f.node->as_boolean()) {
    out = v->get();
    return;
  }
  bad(f, "true or false (got " + type_phrase(*f.node) + ")");
}

bool DeckReader::read_string(std::string_view section, std::string_view key, std::string& out) {
  Field& f = field(section, key);
  if (!f.node) return false;
  if (const auto* v = f.node->as_string()) {
    out = v->get();
    return true;
  }
  bad(f, "a string (got " + type_phrase(*f.node) + ")");
  return false;
}

void DeckReader::read_choice(std::string_view section, std::string_view key, std::string& out,
                             const std::vector<std::string_view>& implemented,
                             const std::vector<std::string_view>& planned) {
  std::string s;
  if (!read_string(section, key, s)) return;
  Field& f = field(section, key);
  if (std::find(implemented.begin(), implemented.end(), s) != implemented.end()) {
    out = s;
    return;
  }
  std::vector<std::string> valid;
  for (std::string_view c : implemented) valid.push_back(toml_string(c));
  const std::string valid_text = valid.size() == 1 ? valid[0] : "one of " + join(valid, ", ");
  if (std::find(planned.begin(), planned.end(), s) != planned.end()) {
    bad(f, fmt::format("{}: {} is not implemented yet (planned)", valid_text, toml_string(s)));
    return;
  }
  std::string hint, planned_text;
  std::size_t best_d = kMaxSuggestDistance + 1;
  for (std::string_view c : implemented) {
    const std::size_t d = edit_distance(s, c);
    if (d < best_d) best_d = d, hint = toml_string(c);
  }
  if (!planned.empty()) {
    std::vector<std::string> p;
    for (std::string_view c : planned) p.push_back(toml_string(c));
    planned_text = fmt::format("; {} planned", join(p, " and "));
  }
  bad(f, fmt::format("{}{}{}", valid_text, planned_text,
                     hint.empty() ? "" : " (did you mean " + hint + "?)"));
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

bool DeckReader::read_path(std::string_view section, std::string_view key, std::string& out,
                           bool allow_empty) {
  std::string s;
  if (!read_string(section, key, s)) return false;
  Field& f = field(section, key);
  if (s.empty()) {
    if (allow_empty) {
      out.clear();
      return true;
    }
    bad(f, "a non-empty path");
    return false;
  }
  out = resolve(s, f);
  return true;
}

void DeckReader::check_data_file(std::string_view key, const std::string& resolved) {
  Field& f = field("data", key);
  std::vector<std::string> why;
  const fs::path p(resolved);
  std::error_code ec;
  const auto st = fs::status(p, ec);
  if (!fs::exists(st)) {
    why.emplace_back("does not exist");
  } else if (fs::is_directory(st)) {
    why.emplace_back("is a directory");
  } else {
    std::ifstream in(p, std::ios::binary);
    if (!in) why.emplace_back("cannot be opened for reading");
  }
  const std::string ext = p.extension().string();
  if (ext != ".txt" && ext != ".bin")
    why.push_back(ext.empty() ? "has no extension" : "ends in " + ext);
  if (why.empty()) return;
  bad(f, fmt::format("an existing, readable .txt (byte-level tokens) or .bin (llm.c token shard) "
                     "file, but {} {}",
                     resolved, join(why, " and ")));
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

// low <= high, reported on the more deliberate of the two. `kind`: "an integer" or "a number".
void DeckReader::check_not_above(const Term& low, const Term& high, std::string_view kind) {
  if (weight(*high.field) > weight(*low.field))
    report_on(high, fmt::format("{} >= {}", kind, mention(low, high)));
  else
    report_on(low, fmt::format("{} <= {}", kind, mention(high, low)));
}

// ---- assembling the Deck -----------------------------------------------------------------------

Deck DeckReader::build() {
  Deck d;
  d.source = source_;

  ModelConfig& m = d.model;
  read_int("model", "layers", m.layers, 1);
  read_int("model", "hidden", m.hidden, 1);
  read_int("model", "heads", m.heads, 1);
  read_int("model", "ffn_hidden", m.ffn_hidden, 1, std::nullopt,
           "(leave it out for the default 4 * model.hidden)");
  read_int("model", "seq_length", m.seq_length, 1);
  read_int("model", "vocab_size", m.vocab_size, 2, kIntMax);
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

  ParallelConfig& p = d.parallel;
  read_int("parallel", "tensor", p.tensor, 1);
  read_int("parallel", "pipeline", p.pipeline, 1);
  read_int("parallel", "data", p.data, 1);

  TrainingConfig& t = d.training;
  read_int("training", "global_batch", t.global_batch, 1);
  read_int("training", "micro_batch", t.micro_batch, 1);
  read_int("training", "steps", t.steps, 1);
  read_seed(t.seed);
  read_choice("training", "precision", t.precision, {"fp32"}, {"bf16", "fp16"});
  read_float("training", "grad_clip", t.grad_clip, 0.0, true, std::nullopt, "(0 = off)");
  read_int("training", "log_interval", t.log_interval, 1);
  read_int("training", "eval_interval", t.eval_interval, 0, std::nullopt, "(0 = never)");
  read_int("training", "eval_windows", t.eval_windows, 1);

  OptimizerConfig& o = d.optimizer;
  read_float("optimizer", "lr", o.lr, 0.0, false);
  read_float("optimizer", "min_lr", o.min_lr, 0.0, true);
  if (Field& min_lr = field("optimizer", "min_lr"); !min_lr.node) {
    o.min_lr = round_decimal(o.lr / 10);  // 10 % of the peak (GPT-3), whatever lr is
    min_lr.default_note = "optimizer.lr / 10";
  }
  read_int("optimizer", "warmup_steps", o.warmup_steps, 0);
  read_choice("optimizer", "decay", o.decay, {"cosine", "linear", "constant"}, {});
  read_float("optimizer", "weight_decay", o.weight_decay, 0.0, true);
  read_float("optimizer", "beta1", o.beta1, 0.0, true, 1.0);
  read_float("optimizer", "beta2", o.beta2, 0.0, true, 1.0);
  read_float("optimizer", "eps", o.eps, 0.0, false);

  // Paths. Defaults are resolved as if written in the deck (relative to its folder).
  Field& train = field("data", "train");
  if (!train.node) {
    add_problem(Origin{From::Default, source_, 0},
                "data.train is required: the training data, a .txt file (byte-level tokens) or "
                "a .bin llm.c token shard, relative to the deck's folder");
    train.ok = false;
  } else if (read_path("data", "train", d.data.train, false)) {
    check_data_file("train", d.data.train);
  }
  if (field("data", "valid").node && read_path("data", "valid", d.data.valid, true) &&
      !d.data.valid.empty())
    check_data_file("valid", d.data.valid);

  Field& run_dir = field("run", "dir");
  if (!run_dir.node)
    d.run.dir = resolve(d.run.dir, run_dir);
  else
    read_path("run", "dir", d.run.dir, false);
  Field& ckpt_dir = field("checkpoint", "dir");
  if (!ckpt_dir.node)
    d.checkpoint.dir = (fs::path(d.run.dir) / "checkpoints").string();
  else
    read_path("checkpoint", "dir", d.checkpoint.dir, false);
  read_int("checkpoint", "interval", d.checkpoint.interval, 0, std::nullopt,
           "(0 = only at the end)");
  read_int("checkpoint", "keep", d.checkpoint.keep, 1);
  read_bool("checkpoint", "resume", d.checkpoint.resume);

  // Cross-key rules, only between values that passed their own checks.
  auto term = [this](std::string_view section, std::string_view key, std::int64_t v) {
    return Term{full_name(section, key), std::to_string(v), &field(section, key)};
  };
  auto ok = [this](std::string_view section, std::string_view key) {
    return field(section, key).ok;
  };
  if (ok("model", "hidden") && ok("model", "heads"))
    check_multiple(term("model", "hidden", m.hidden), term("model", "heads", m.heads), m.hidden,
                   m.heads, "each head has model.hidden / model.heads features");
  if (ok("model", "heads") && ok("parallel", "tensor"))
    check_multiple(term("model", "heads", m.heads), term("parallel", "tensor", p.tensor), m.heads,
                   p.tensor, "tensor parallelism gives each rank whole heads");
  if (ok("model", "ffn_hidden") && ok("model", "hidden") && ok("parallel", "tensor"))
    check_multiple(term("model", "ffn_hidden", m.ffn_hidden), term("parallel", "tensor", p.tensor),
                   m.ffn_hidden, p.tensor,
                   "tensor parallelism splits the MLP width evenly across ranks");
  if (ok("model", "layers") && ok("parallel", "pipeline"))
    check_multiple(term("model", "layers", m.layers), term("parallel", "pipeline", p.pipeline),
                   m.layers, p.pipeline, "each pipeline stage holds the same number of layers");
  check_batch(d);
  if (ok("parallel", "tensor") && ok("parallel", "pipeline") && ok("parallel", "data")) {
    const std::int64_t world = static_cast<std::int64_t>(p.tensor) * p.pipeline * p.data;
    if (world > kIntMax) {
      const Term tt = term("parallel", "tensor", p.tensor),
                 tp = term("parallel", "pipeline", p.pipeline),
                 td = term("parallel", "data", p.data);
      const Term* s = &tt;
      if (weight(*tp.field) > weight(*s->field)) s = &tp;
      if (weight(*td.field) > weight(*s->field)) s = &td;
      report_on(*s, fmt::format("parallel.tensor * parallel.pipeline * parallel.data = {} ranks "
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
  return d;
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
                const std::vector<std::string>& overrides) {
  DeckReader reader(source_name, base_dir);
  reader.apply_overrides(overrides);
  if (!text) {
    reader.add_problem(Origin{From::Default, source_name, 0}, read_error);
  } else if (reader.parse_text(*text)) {
    reader.scan_file();
    Deck deck = reader.build();
    reader.throw_if_problems();
    return deck;
  }
  reader.throw_if_problems();
  throw DeckError({source_name + ": cannot load deck"});  // not reached
}

}  // namespace

// ---- public entry points -----------------------------------------------------------------------

Deck parse_deck(std::string_view toml_text, const std::string& source_name,
                const std::string& base_dir, const std::vector<std::string>& overrides) {
  return parse_impl(toml_text, {}, source_name, base_dir, overrides);
}

Deck load_deck(const std::string& path, const std::vector<std::string>& overrides) {
  if (path.empty())
    return parse_impl(std::nullopt, "cannot read deck file: no path given", "<deck>", {},
                      overrides);
  const fs::path p(path);
  const std::string base_dir = fs::absolute(p).parent_path().string();
  std::error_code ec;
  const auto st = fs::status(p, ec);
  std::string error;
  if (!fs::exists(st)) {
    error = "cannot read deck file: it does not exist";
  } else if (fs::is_directory(st)) {
    error = "cannot read deck file: it is a directory";
  } else {
    std::ifstream in(p, std::ios::binary);
    if (in) {
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      if (!in.bad()) return parse_impl(std::string_view{text}, {}, path, base_dir, overrides);
    }
    error = "cannot read deck file: it cannot be opened for reading";
  }
  return parse_impl(std::nullopt, error, path, base_dir, overrides);
}

// ---- writing the resolved deck -----------------------------------------------------------------

std::string Deck::to_toml() const {
  std::string src;
  for (char c : source) src += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  std::string out;
  auto line = [&out](std::string_view key, const std::string& value) {
    out += fmt::format("{} = {}\n", key, value);
  };
  auto num = [](auto v) { return std::to_string(v); };
  out += fmt::format(
      "# tptrain deck resolved from {}: every key, defaults filled in, absolute paths\n",
      src.empty() ? "<unnamed>" : src);
  out += "\n[model]\n";
  line("layers", num(model.layers));
  line("hidden", num(model.hidden));
  line("heads", num(model.heads));
  line("ffn_hidden", num(model.ffn_width()));
  line("seq_length", num(model.seq_length));
  line("vocab_size", num(model.vocab_size));
  out += "\n[parallel]\n";
  line("tensor", num(parallel.tensor));
  line("pipeline", num(parallel.pipeline));
  line("data", num(parallel.data));
  out += "\n[training]\n";
  line("global_batch", num(training.global_batch));
  line("micro_batch", num(training.micro_batch));
  line("steps", num(training.steps));
  line("seed", num(training.seed));
  line("precision", toml_string(training.precision));
  line("grad_clip", toml_float(training.grad_clip));
  line("log_interval", num(training.log_interval));
  line("eval_interval", num(training.eval_interval));
  line("eval_windows", num(training.eval_windows));
  out += "\n[optimizer]\n";
  line("lr", toml_float(optimizer.lr));
  line("min_lr", toml_float(optimizer.min_lr));
  line("warmup_steps", num(optimizer.warmup_steps));
  line("decay", toml_string(optimizer.decay));
  line("weight_decay", toml_float(optimizer.weight_decay));
  line("beta1", toml_float(optimizer.beta1));
  line("beta2", toml_float(optimizer.beta2));
  line("eps", toml_float(optimizer.eps));
  out += "\n[data]\n";
  line("train", toml_string(data.train));
  line("valid", toml_string(data.valid));
  out += "\n[checkpoint]\n";
  line("dir", toml_string(checkpoint.dir));
  line("interval", num(checkpoint.interval));
  line("keep", num(checkpoint.keep));
  line("resume", checkpoint.resume ? "true" : "false");
  out += "\n[run]\n";
  line("dir", toml_string(run.dir));
  return out;
}

}  // namespace tptrain::io
