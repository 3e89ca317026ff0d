// The registry of the sublayer kinds' descriptions (docs/design.md, "Sublayer kinds"): the one
// file that includes every kind's description. The block descriptor, the checkpoint, the planner
// and the docs ask it which kind fills a slot and iterate it; the kinds' modules are composed by
// src/model/transformer_layer.hpp. A new kind is a line here and a line there.
#pragma once

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "base/layout_rules.hpp"
#include "src/model/spec/gelu_mlp_kind.hpp"
#include "src/model/spec/grouped_query_attention_kind.hpp"
#include "src/model/spec/layernorm_kind.hpp"
#include "src/model/spec/learned_position_kind.hpp"
#include "src/model/spec/llama3_rope_kind.hpp"
#include "src/model/spec/moe_kind.hpp"
#include "src/model/spec/multi_head_latent_attention_kind.hpp"
#include "src/model/spec/relu2_mlp_kind.hpp"
#include "src/model/spec/rmsnorm_kind.hpp"
#include "src/model/spec/rope_kind.hpp"
#include "src/model/spec/swiglu_mlp_kind.hpp"
#include "src/model/spec/yarn_rope_kind.hpp"

namespace tptrain::model {

inline constexpr const SublayerKind* kSublayerKinds[] = {
    &kLayerNorm, &kRmsNorm,                            // model.norm
    &kLearnedPosition, &kRope, &kLlama3Rope, &kYarnRope,  // model.position
    &kGroupedQueryAttention, &kLatentAttention,        // model.attention
    &kGeluMlp,   &kSwigluMlp, &kMoeMlp, &kRelu2Mlp,  // model.mlp
};

// The kind named `name` for `slot`, or nullptr.
inline const SublayerKind* kind_named(SublayerSlot slot, std::string_view name) {
  for (const SublayerKind* k : kSublayerKinds)
    if (k->slot == slot && k->name == name) return k;
  return nullptr;
}

// The kind shape s's specification puts in `slot` (model.norm, model.position, model.mlp).
inline const SublayerKind& kind_in(SublayerSlot slot, const ModelShape& s) {
  const std::string& name = slot_value(s, slot);
  if (const SublayerKind* k = kind_named(slot, name)) return *k;
  throw std::logic_error(std::string("tptrain: no sublayer kind \"") + name + "\" for model." + slot_key(slot) +
                         " in the registry (src/model/spec/sublayer_kinds.hpp)");
}
inline const SublayerKind& norm_kind(const ModelShape& s) { return kind_in(SublayerSlot::norm, s); }
inline const SublayerKind& position_kind(const ModelShape& s) { return kind_in(SublayerSlot::position, s); }
inline const SublayerKind& attention_kind(const ModelShape& s) { return kind_in(SublayerSlot::attention, s); }
inline const SublayerKind& mlp_kind(const ModelShape& s) { return kind_in(SublayerSlot::mlp, s); }

// The names of the kinds that fill `slot`, in the registry's order (the deck's choices).
inline std::vector<std::string_view> kind_names(SublayerSlot slot) {
  std::vector<std::string_view> names;
  for (const SublayerKind* k : kSublayerKinds)
    if (k->slot == slot) names.emplace_back(k->name);
  return names;
}

// Every kind the specification chooses, a kind per slot, in the slots' order.
inline std::vector<const SublayerKind*> kinds_of(const ModelShape& s) {
  return {&norm_kind(s), &position_kind(s), &attention_kind(s), &mlp_kind(s)};
}

// The value of kind key k in shape s (a switch's 1 or 0; a choice's has none: 0), and as the deck
// writes it.
inline double kind_key_value(const KindKey& k, const ModelShape& s) {
  if (k.integer != nullptr) return double(s.*k.integer);
  if (k.number != nullptr) return s.*k.number;
  if (k.flag != nullptr) return s.*k.flag ? 1.0 : 0.0;
  return 0.0;
}
inline std::string kind_key_text(const KindKey& k, const ModelShape& s) {
  if (k.integer != nullptr) return std::to_string(s.*k.integer);
  if (k.number != nullptr) return fmt::format("{}", s.*k.number);
  if (k.flag != nullptr) return s.*k.flag ? "true" : "false";
  return fmt::format("\"{}\"", s.*k.text);
}
inline bool kind_key_at_default(const KindKey& k, const ModelShape& s) {
  return k.text != nullptr ? s.*k.text == k.default_text : kind_key_value(k, s) == k.default_value;
}
// Sets kind key k of shape s to its default (as a deck that leaves it out reads), or to the deck's
// text of it (a number as fmt prints it, true/false, a choice's name); throws std::invalid_argument
// or std::out_of_range when the text is not one.
inline void set_kind_key(const KindKey& k, ModelShape& s, const std::string* deck_text = nullptr) {
  if (k.integer != nullptr) s.*k.integer = deck_text ? std::stoi(*deck_text) : static_cast<int>(k.default_value);
  else if (k.number != nullptr) s.*k.number = deck_text ? std::stod(*deck_text) : k.default_value;
  else if (k.flag != nullptr) {
    if (deck_text && *deck_text != "true" && *deck_text != "false") throw std::invalid_argument("not true or false");
    s.*k.flag = deck_text ? *deck_text == "true" : k.default_value != 0;
  } else
    s.*k.text = deck_text ? *deck_text : std::string(k.default_text);
}

// The integer [model] keys of shape s's kinds, for messages that give its shape:
// ", model.experts = 8, model.experts_per_token = 2" (a mixture's); "" for none.
inline std::string kind_sizes_text(const ModelShape& s) {
  std::string out;
  for (const SublayerKind* kind : kinds_of(s))
    for (const KindKey& k : kind->keys)
      if (k.integer != nullptr && std::string_view(k.section) == "model")
        out += fmt::format(", model.{} = {}", k.key, s.*k.integer);
  return out;
}

// Every kind's keys, each once (kinds may share one: the rotary kinds' model.rope_theta), in the
// registry's order, with the first kind that has it: the deck's key table, a checkpoint's reader.
struct OwnedKindKey {
  const KindKey* key;
  const SublayerKind* kind;
};
inline const std::vector<OwnedKindKey>& kind_keys() {
  static const std::vector<OwnedKindKey> keys = [] {
    std::vector<OwnedKindKey> out;
    for (const SublayerKind* kind : kSublayerKinds)
      for (const KindKey& k : kind->keys) {
        const bool seen = std::any_of(out.begin(), out.end(), [&](const OwnedKindKey& o) {
          return std::string_view(o.key->section) == k.section && std::string_view(o.key->key) == k.key;
        });
        if (!seen) out.push_back({&k, kind});
      }
    return out;
  }();
  return keys;
}
// Whether one of shape s's kinds has key k.
inline bool chosen_key(const ModelShape& s, const KindKey& k) {
  for (const SublayerKind* kind : kinds_of(s))
    for (const KindKey& own : kind->keys)
      if (std::string_view(own.section) == k.section && std::string_view(own.key) == k.key) return true;
  return false;
}

// The deck's rule for the keys no kind of s has: at their defaults (a deck leaves them out; a
// resolved deck lists them at their defaults, and loads again). A shape built in code keeps
// BlockSpec's defaults, which are not all the deck's.
inline std::vector<rules::Problem> unchosen_key_problems(const ModelShape& s) {
  std::vector<rules::Problem> out;
  for (const auto& [key, kind] : kind_keys()) {
    const KindKey& k = *key;
    if (chosen_key(s, k) || kind_key_at_default(k, s)) continue;
    const std::string slot = slot_key(kind->slot);
    out.push_back(rules::Problem::statement(
        {std::string(k.section) + "." + k.key, 0, kind_key_text(k, s)},
        fmt::format("to be left out with {{model.{}}}: {} (model.{} = \"{}\")", slot, k.left_out, slot, kind->name),
        {{"model." + slot, 0, fmt::format("\"{}\"", slot_value(s, kind->slot))}}));
  }
  return out;
}

// The rules of shape s's kinds, each kind's own (sublayer_kind.hpp), with its keys' ranges: the
// model, the planner and a checkpoint's deck throw them. The deck reports each at its key's line
// (io/deck.cpp): the ranges from its key table, then the kinds' problems.
inline std::vector<rules::Problem> sublayer_problems(const ModelShape& s) {
  std::vector<rules::Problem> out;
  for (const SublayerKind* kind : kinds_of(s)) {
    for (const KindKey& k : kind->keys) {
      const rules::KeyValue subject{std::string(k.section) + "." + k.key, 0, kind_key_text(k, s)};
      if (k.flag != nullptr) continue;
      if (k.text != nullptr) {
        if (std::find(k.choices.begin(), k.choices.end(), s.*k.text) != k.choices.end()) continue;
        std::string names;
        for (const char* c : k.choices) names += fmt::format("{}\"{}\"", names.empty() ? "" : ", ", c);
        out.push_back(rules::Problem::statement(subject, "one of " + names));
        continue;
      }
      const double v = kind_key_value(k, s);
      if ((k.lowest_inclusive ? v >= k.lowest : v > k.lowest) && v < k.highest) continue;  // NaN fails
      out.push_back(rules::Problem::statement(
          subject, fmt::format("{} {}{}", k.lowest_inclusive ? "at least" : "above", k.lowest,
                               std::isinf(k.highest) ? "" : fmt::format(" and below {}", k.highest))));
    }
    if (kind->problems != nullptr)
      for (rules::Problem& p : kind->problems(s)) out.push_back(std::move(p));
  }
  return out;
}

// Whether shape s's kinds hold experts (its MLP routes tokens to them: a mixture), which expert
// parallelism splits; the experts one rank holds, E / ep (0 without), and the first of them on
// expert-parallel rank r.
inline bool holds_experts(const ModelShape& s) { return mlp_kind(s).mlp.routed; }
inline int local_experts(const GptShape& s) { return holds_experts(s) ? s.experts / s.expert : 0; }
inline int first_expert(const GptShape& s, int ep_rank) { return ep_rank * local_experts(s); }
// The MLP's width: F, or each routed expert's F_e (a mixture's); and its fc rows: the width, or
// gate and up stacked, twice it (a gated kind's).
inline std::int64_t mlp_width(const ModelShape& s) { return mlp_kind(s).mlp.routed ? s.expert_ffn() : s.ffn_width(); }
inline std::int64_t mlp_fc_rows(const ModelShape& s) { return (mlp_kind(s).mlp.gated ? 2 : 1) * mlp_width(s); }

// The checks of shape s that ask its kinds, after s.validate(): the kinds' rules, expert
// parallelism's layout rule (base/layout_rules.hpp) and the MLP's fc rows as a BLAS dimension.
// Throws as validate does: the model and the planner run it before they build or count.
inline void validate_kinds(const GptShape& s) {
  std::vector<rules::Problem> broken = sublayer_problems(s);
  for (rules::Problem& p : rules::expert_problems(holds_experts(s), s.experts, s.expert, 0))
    broken.push_back(std::move(p));
  for (const rules::Problem& p : broken) throw std::invalid_argument("tptrain: " + p.text());
  if (mlp_fc_rows(s) > GptShape::int_limit)
    throw std::length_error("tptrain: 2 * model.ffn_hidden = " + std::to_string(mlp_fc_rows(s)) +
                            " gate and up rows exceed the limit " + std::to_string(GptShape::int_limit) +
                            " of a BLAS dimension");
}

// The metrics of shape s's kinds from their statistics summed over the ranks, kind by kind.
// With multi-token prediction also its loss: the mean over its modules' rows (mtp_loss).
inline std::vector<SublayerMetrics> sublayer_metrics(const GptShape& s, const StatisticSums& sums) {
  std::vector<SublayerMetrics> out;
  for (const SublayerKind* k : kinds_of(s))
    if (k->metrics != nullptr) out.push_back(k->metrics(s, sums));
  if (s.mtp_depth > 0) {
    const double rows = sums.get("mtp.rows").empty() ? 0.0 : sums.get("mtp.rows").at(0);
    const double loss = rows > 0 ? sums.get("mtp.loss_sum").at(0) / rows : 0.0;
    SublayerMetrics m;
    m.fields = {{"mtp_loss", {loss}, MetricField::number, 9}};
    m.summary = fmt::format("mtp loss {:.4f}", loss);
    out.push_back(m);
  }
  return out;
}

}  // namespace tptrain::model
