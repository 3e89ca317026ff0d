// The [model] keys whose defaults are the block preset's (model.architecture; src/model/spec/block_spec.hpp),
// each with how the preset sets it: the one list that a default Deck (ModelConfig::
// take_preset_defaults) and the parser (the keys a deck leaves out) both walk.
#pragma once

#include <string_view>
#include <vector>

#include "src/model/spec/block_spec.hpp"
#include "io/deck.hpp"

namespace tptrain::io {

struct PresetDefault {
  std::string_view key;  // under [model]
  void (*take)(ModelConfig& m, const model::BlockSpec& preset);
};

inline const std::vector<PresetDefault>& preset_defaults() {
  static const std::vector<PresetDefault> keys = {
      {"norm", [](ModelConfig& m, const model::BlockSpec& p) { m.norm = model::norm_name(p.norm); }},
      {"mlp", [](ModelConfig& m, const model::BlockSpec& p) { m.mlp = model::mlp_name(p.mlp); }},
      {"position", [](ModelConfig& m, const model::BlockSpec& p) { m.position = model::position_name(p.position); }},
      {"qkv_bias", [](ModelConfig& m, const model::BlockSpec& p) { m.qkv_bias = p.qkv_bias; }},
      {"linear_bias", [](ModelConfig& m, const model::BlockSpec& p) { m.linear_bias = p.linear_bias; }},
      {"tie_embeddings", [](ModelConfig& m, const model::BlockSpec& p) { m.tie_embeddings = p.tie_embeddings; }},
  };
  return keys;
}

}  // namespace tptrain::io
