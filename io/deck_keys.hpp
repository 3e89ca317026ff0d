// The deck's keys, in one table: name, type and valid values, default, one line of meaning, and
// where the value lives in a Deck. Parsing and validation (io/deck.cpp), the defaults of a
// default-constructed Deck, Deck::to_toml(), Deck::to_json() and operator== all walk this
// table, so a new key is a member in its section struct (io/deck.hpp) plus one row in
// io/deck_keys.cpp. tests/io/test_deck.cpp fails until input/tiny.toml names it and the tables of
// docs/deck-reference.md, printed from this table, are regenerated (TPTRAIN_UPDATE_DOCS=1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "src/model/spec/gpt_shape.hpp"

namespace tptrain::io {

struct Deck;
struct DataSources;

// Valid values of a key. `note` is appended to the range in messages ("(0 = off)").
struct IntRange {
  std::int64_t lo = 0;
  std::optional<std::int64_t> hi;  // none: up to what the member's type holds
  std::string_view note;
};
struct NumberRange {
  double lo = 0.0;
  bool lo_inclusive = true;
  std::optional<double> hi;  // none: any finite number above lo
  std::string_view note;
  bool hi_inclusive = false;
};
struct Choice {
  Choice() = default;
  Choice(std::vector<std::string_view> v, std::string_view prefix = {}) : values(std::move(v)), path_prefix(prefix) {}
  std::vector<std::string_view> values;  // in the order messages list them
  // Also valid: "<prefix>PATH", PATH relative to the deck's folder ("tiktoken:PATH"); "" = none.
  std::string_view path_prefix;
};
struct PathRule {
  bool allow_empty = false;  // "" means "none"
  bool data_file = false;    // must be a readable regular .txt/.bin file
};
struct AnyBoolean {};
using KeyRule = std::variant<IntRange, NumberRange, Choice, PathRule, AnyBoolean>;

// A key's default: a value, a value derived from other keys (how, for messages and documents),
// or none (the key is required).
struct Derived {
  std::string_view how;  // "4 * model.hidden"
};
struct Required {};
using KeyDefault = std::variant<std::int64_t, double, std::string_view, bool, Derived, Required>;

// Where the value lives in a Deck: an accessor, or for a sublayer kind's key (its description's,
// src/model/spec/sublayer_kind.hpp) a member of the model's specification, Deck::model.
// data.train and data.valid are DataSources (io/data_sources.hpp): a path or a weighted blend.
using KeyRef = std::variant<int& (*)(Deck&), std::uint64_t& (*)(Deck&), double& (*)(Deck&),
                            std::string& (*)(Deck&), bool& (*)(Deck&), DataSources& (*)(Deck&),
                            int model::ModelShape::*, double model::ModelShape::*, std::string model::ModelShape::*,
                            bool model::ModelShape::*>;

enum class KeyType { Integer, Number, String, Path, Boolean };

struct DeckKey {
  std::string_view section;
  std::string_view key;
  KeyDefault default_value;
  KeyRule rule;
  std::string_view doc;  // what the key means, one line
  KeyRef ref;

  std::string name() const;  // "section.key"
  KeyType type() const;
};

// Every key, in the order of the resolved deck (to_toml, to_json, the reference tables).
const std::vector<DeckKey>& deck_keys();
// The sections in that order.
const std::vector<std::string_view>& deck_sections();
// nullptr when there is no such key.
const DeckKey* find_deck_key(std::string_view section, std::string_view key);

// Calls f with the key's member of `d` (int&, std::uint64_t&, double&, std::string&, bool& or
// DataSources&).
template <class D, class Ref>
auto& key_member(D& d, Ref ref) {
  if constexpr (std::is_member_object_pointer_v<Ref>)
    return d.model.*ref;
  else
    return ref(d);
}
template <class F>
void visit_member(Deck& d, const DeckKey& k, F&& f) {
  std::visit([&](auto ref) { f(key_member(d, ref)); }, k.ref);
}
template <class F>
void visit_member(const Deck& d, const DeckKey& k, F&& f) {
  // The accessors take a Deck&; reading through them never writes.
  std::visit([&](auto ref) { f(std::as_const(key_member(const_cast<Deck&>(d), ref))); }, k.ref);
}

}  // namespace tptrain::io
