// A broken rule as data: the keys it involves and what was expected. The rules themselves live
// with their owners (issue 31, "deck rules live with their owners"): the block specification's
// in src/model/spec/block_spec.hpp, the parallel layout's and the schedule's in base/layout_rules.hpp. A
// rule returns its problems; each reader words them for its place: the deck (io/deck.cpp) at the
// file:line of the key to blame, the model and the schedule as std::invalid_argument text, the
// planner as the reason a layout is skipped. Plain data: io/ and src/ both read it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace tptrain::rules {

struct KeyValue {
  std::string key;  // "parallel.tensor"
  std::int64_t value = 0;
  std::string shown;  // the value as a deck writes it, when it is not an integer ("\"rope\"", "false", "1e-06")

  KeyValue() = default;
  KeyValue(std::string k, std::int64_t v, std::string s = {}) : key(std::move(k)), value(v), shown(std::move(s)) {}

  std::string value_text() const { return shown.empty() ? std::to_string(value) : shown; }
};

// One broken rule. A divisibility (divisor set): subject must be a multiple of divisor, and the
// deck blames whichever of the two the user set more deliberately, as "a multiple of" or "a
// divisor of"; `why` says what the rule is for. Otherwise `expected` is what the subject must be;
// in it "{model.position}" stands for a key of `mentions`, which each reader writes with its
// value and, in the deck, where it was set.
struct Problem {
  KeyValue subject;
  KeyValue divisor{};  // key empty: not a divisibility
  std::string expected;  // (a statement) "1 with parallel.pipeline = 1: ..."
  std::string why;       // (a divisibility) "tensor parallelism gives each rank whole key/value heads; ..."
  std::vector<KeyValue> mentions;  // the other keys a statement names

  bool divisibility() const { return !divisor.key.empty(); }
  // `expected` with each "{key}" of `mentions` replaced by mention(that key's KeyValue).
  std::string expected_text(const std::function<std::string(const KeyValue&)>& mention) const {
    std::string out = expected;
    for (const KeyValue& m : mentions) {
      const std::string slot = "{" + m.key + "}";
      for (std::size_t at = out.find(slot); at != std::string::npos; at = out.find(slot, at)) {
        const std::string text = mention(m);
        out.replace(at, slot.size(), text);
        at += text.size();
      }
    }
    return out;
  }
  // The problem on one line, for an exception or the planner: "model.kv_heads = 4 is not a
  // multiple of parallel.tensor = 3 (tensor parallelism gives ...)".
  std::string text() const {
    if (divisibility())
      return fmt::format("{} = {} is not a multiple of {} = {} ({})", subject.key, subject.value_text(), divisor.key,
                         divisor.value_text(), why);
    return fmt::format("{} = {}: expected {}", subject.key, subject.value_text(),
                       expected_text([](const KeyValue& m) { return m.key + " = " + m.value_text(); }));
  }

  static Problem statement(KeyValue subject, std::string expected, std::vector<KeyValue> mentions = {}) {
    Problem p;
    p.subject = std::move(subject);
    p.expected = std::move(expected);
    p.mentions = std::move(mentions);
    return p;
  }
  static Problem divisible(KeyValue dividend, KeyValue divisor, std::string why) {
    Problem p;
    p.subject = std::move(dividend);
    p.divisor = std::move(divisor);
    p.why = std::move(why);
    return p;
  }
};

}  // namespace tptrain::rules
