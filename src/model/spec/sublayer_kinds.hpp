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
#include "src/model/spec/swiglu_mlp_kind.hpp"

namespace tptrain::model {

inline constexpr const SublayerKind* kSublayerKinds[] = {
    &kGeluMlp,
    &kSwigluMlp,
    &kMoeMlp,
};

// The kind shape s's specification puts in its MLP slot (model.mlp).
inline const SublayerKind& mlp_kind(const GptShape& s) {
  for (const SublayerKind* k : kSublayerKinds)
    if (k->slot == SublayerSlot::mlp && std::string(k->name) == mlp_name(s.mlp)) return *k;
  throw std::logic_error(std::string("tptrain: no sublayer kind \"") + mlp_name(s.mlp) +
                         "\" for the MLP in the registry (src/model/spec/sublayer_kinds.hpp)");
}

// Every kind the specification's block is made of, in the block's order.
inline std::vector<const SublayerKind*> kinds_of(const GptShape& s) { return {&mlp_kind(s)}; }

// The metrics of shape s's kinds from their statistics summed over the ranks, kind by kind.
inline std::vector<SublayerMetrics> sublayer_metrics(const GptShape& s, const StatisticSums& sums) {
  std::vector<SublayerMetrics> out;
  for (const SublayerKind* k : kinds_of(s))
    if (k->metrics != nullptr) out.push_back(k->metrics(s, sums));
  return out;
}

}  // namespace tptrain::model
