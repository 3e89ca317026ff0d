// A Deck's values by the key table (io/deck_keys.hpp): defaults, comparison, the resolved deck
// as TOML and as JSON. Nothing here names a key, so a new key needs no code here.
#include <fmt/format.h>

#include <string>
#include <type_traits>

#include "src/model/spec/block_spec.hpp"
#include "io/deck.hpp"
#include "io/deck_keys.hpp"
#include "io/deck_text.hpp"
#include "io/json_line.hpp"

namespace tptrain::io {

namespace {

template <class Member>
void assign_default(Member& m, const KeyDefault& def) {
  std::visit(
      [&m](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<Member, bool>) {
          if constexpr (std::is_same_v<V, bool>) m = v;
        } else if constexpr (std::is_integral_v<Member>) {
          if constexpr (std::is_same_v<V, std::int64_t>) m = static_cast<Member>(v);
        } else if constexpr (std::is_same_v<Member, double>) {
          if constexpr (std::is_same_v<V, double>) m = v;
        } else if constexpr (std::is_same_v<Member, std::string> || std::is_same_v<Member, DataSources>) {
          if constexpr (std::is_same_v<V, std::string_view>) m = std::string(v);
        }
      },
      def);
}

template <class Member>
std::string toml_value(const Member& m) {
  if constexpr (std::is_same_v<Member, bool>)
    return m ? "true" : "false";
  else if constexpr (std::is_integral_v<Member>)
    return std::to_string(m);
  else if constexpr (std::is_same_v<Member, double>)
    return toml_float(m);
  else if constexpr (std::is_same_v<Member, DataSources>)
    return m.text();  // a path, or the blend's inline array of tables
  else
    return toml_string(m);
}

// JSON spells every value as TOML does (io/json_line.hpp: one writer for every JSON line).
template <class Member>
void add_json(JsonObject& o, std::string_view key, const Member& m) {
  if constexpr (std::is_same_v<Member, bool>)
    o.boolean(key, m);
  else if constexpr (std::is_integral_v<Member>)
    o.integer(key, m);
  else if constexpr (std::is_same_v<Member, double>)
    o.number(key, m);  // finite: the loader refuses others
  else if constexpr (std::is_same_v<Member, DataSources>) {
    if (!m.is_blend()) {
      o.string(key, m.empty() ? std::string() : m.sources.front().path);
      return;
    }
    std::vector<JsonObject> entries;  // [{"path": ..., "weight": ...}, ...]
    for (const DataSource& e : m.sources) entries.push_back(JsonObject().string("path", e.path).number("weight", e.weight));
    o.objects(key, entries);
  } else
    o.string(key, m);
}

// ffn_hidden = 0 stands for 4 * hidden, kv_heads = 0 for heads: compared and printed resolved.
Deck resolved(const Deck& d) {
  Deck r = d;
  r.model.ffn_hidden = r.model.ffn_width();
  r.model.kv_heads = r.model.kv_head_count();
  return r;
}

bool equal_keys(const Deck& a_in, const Deck& b_in, std::string_view section) {
  const Deck a = resolved(a_in), b = resolved(b_in);
  for (const DeckKey& k : deck_keys()) {
    if (!section.empty() && k.section != section) continue;
    bool same = true;
    visit_member(a, k, [&](const auto& x) {
      visit_member(b, k, [&](const auto& y) {
        if constexpr (std::is_same_v<decltype(x), decltype(y)>) same = x == y;
      });
    });
    if (!same) return false;
  }
  return true;
}

template <auto Section, class Config>
bool equal_section(const Config& a, const Config& b, std::string_view name) {
  Deck x, y;
  x.*Section = a;
  y.*Section = b;
  return equal_keys(x, y, name);
}

}  // namespace

Deck::Deck() {
  for (const DeckKey& k : deck_keys())
    visit_member(*this, k, [&k](auto& m) { assign_default(m, k.default_value); });
  // The derived defaults, from the defaults above (the parser derives them from given values).
  optimizer.min_lr = round_decimal(optimizer.lr / 10);
  optimizer.shard = "none";  // optimizer.distributed's default, false
  checkpoint.dir = run.dir + "/checkpoints";
  model.ffn_hidden = 0;  // "4 * model.hidden" and "model.heads", until the parser resolves them
  model.kv_heads = 0;
  model.take_preset_defaults();
}

int ParallelConfig::world_size() const { return tensor * context * pipeline * data; }
int Deck::grad_accum_steps() const {
  const int per_step = training.micro_batch * parallel.data;
  return per_step > 0 ? training.global_batch / per_step : 0;
}

bool operator==(const model::ModelShape& a, const model::ModelShape& b) {
  return equal_section<&Deck::model>(a, b, "model");
}
bool operator==(const ParallelConfig& a, const ParallelConfig& b) {
  return equal_section<&Deck::parallel>(a, b, "parallel");
}
bool operator==(const TrainingConfig& a, const TrainingConfig& b) {
  return equal_section<&Deck::training>(a, b, "training");
}
bool operator==(const OptimizerConfig& a, const OptimizerConfig& b) {
  return equal_section<&Deck::optimizer>(a, b, "optimizer");
}
bool operator==(const DataConfig& a, const DataConfig& b) {
  return equal_section<&Deck::data>(a, b, "data");
}
bool operator==(const CheckpointConfig& a, const CheckpointConfig& b) {
  return equal_section<&Deck::checkpoint>(a, b, "checkpoint");
}
bool operator==(const RunConfig& a, const RunConfig& b) {
  return equal_section<&Deck::run>(a, b, "run");
}
bool operator==(const Deck& a, const Deck& b) { return equal_keys(a, b, {}); }

std::string Deck::to_toml() const {
  std::string src;
  for (char c : source) src += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  std::string out = fmt::format(
      "# tptrain deck resolved from {}: every key, defaults filled in, absolute paths\n",
      src.empty() ? "<unnamed>" : src);
  const Deck r = resolved(*this);
  for (std::string_view section : deck_sections()) {
    out += fmt::format("\n[{}]\n", section);
    for (const DeckKey& k : deck_keys()) {
      if (k.section != section) continue;
      visit_member(r, k, [&](const auto& m) { out += fmt::format("{} = {}\n", k.key, toml_value(m)); });
    }
  }
  return out;
}

std::string Deck::to_json() const {
  const Deck r = resolved(*this);
  JsonObject o;
  for (const DeckKey& k : deck_keys()) visit_member(r, k, [&](const auto& m) { add_json(o, k.name(), m); });
  o.integer("ranks", static_cast<long long>(parallel.tensor) * parallel.context * parallel.pipeline * parallel.data);
  return o.text();
}

}  // namespace tptrain::io
