// The registry of the sublayer kinds' descriptions (docs/design.md, "Sublayer kinds"): the one
// file that includes every kind's description. The block descriptor, the checkpoint, the planner
// and the docs ask it which kind fills a slot and iterate it; the kinds' modules are composed by
// src/model/transformer_layer.hpp. A new kind is a line here and a line there.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "src/model/spec/gelu_mlp_kind.hpp"
#include "src/model/spec/moe_kind.hpp"
#include "src/model/spec/relu2_mlp_kind.hpp"
#include "src/model/spec/swiglu_mlp_kind.hpp"

namespace tptrain::model {

inline constexpr const SublayerKind* kSublayerKinds[] = {
    &kGeluMlp,
    &kSwigluMlp,
    &kMoeMlp,
    &kRelu2Mlp,
};

// The kind shape s's specification puts in its MLP slot (model.mlp).
inline const SublayerKind& mlp_kind(const ModelShape& s) {
  for (const SublayerKind* k : kSublayerKinds)
    if (k->slot == SublayerSlot::mlp && k->name == s.mlp) return *k;
  throw std::logic_error(std::string("tptrain: no sublayer kind \"") + s.mlp +
                         "\" for the MLP in the registry (src/model/spec/sublayer_kinds.hpp)");
}

// The names of the kinds that fill `slot`, in the registry's order (the deck's choices).
inline std::vector<std::string> kind_names(SublayerSlot slot) {
  std::vector<std::string> names;
  for (const SublayerKind* k : kSublayerKinds)
    if (k->slot == slot) names.emplace_back(k->name);
  return names;
}

// Every kind the specification's block is made of, in the block's order.
inline std::vector<const SublayerKind*> kinds_of(const ModelShape& s) { return {&mlp_kind(s)}; }

// The rules of shape s's kinds (each kind's own, sublayer_kind.hpp): the deck reports them at
// the keys' lines, the model and the planner throw them.
inline std::vector<rules::Problem> sublayer_problems(const ModelShape& s) {
  std::vector<rules::Problem> out;
  for (const SublayerKind* k : kinds_of(s))
    if (k->problems != nullptr)
      for (rules::Problem& p : k->problems(s)) out.push_back(std::move(p));
  return out;
}

// The metrics of shape s's kinds from their statistics summed over the ranks, kind by kind.
inline std::vector<SublayerMetrics> sublayer_metrics(const GptShape& s, const StatisticSums& sums) {
  std::vector<SublayerMetrics> out;
  for (const SublayerKind* k : kinds_of(s))
    if (k->metrics != nullptr) out.push_back(k->metrics(s, sums));
  return out;
}

}  // namespace tptrain::model
