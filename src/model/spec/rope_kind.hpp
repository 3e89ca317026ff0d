// Rotary positions (model.position = "rope"; Su et al. 2021, Llama): q and k of each head rotated
// pairwise (rotate-half) by angles p · θ^(−2i/d), θ = model.rope_theta, so that their dot product
// depends on the positions' difference. No parameters; its tables and its forward and backward:
// src/model/rotary_position.hpp.
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/model/spec/sublayer_kind.hpp"

namespace tptrain::model {

// The tables, computed once per stage (positions are global: the whole sequence's rows).
inline constexpr BufferRow kRopeBuffers[] = {
    {"rope.cos", "rotary table cos(p·θ^(-2i/d))", {BufferDim::seq, BufferDim::d_2}, Element::fp32, Lifetime::scratch},
    {"rope.sin", "rotary table sin(p·θ^(-2i/d))", {BufferDim::seq, BufferDim::d_2}, Element::fp32, Lifetime::scratch},
};

inline constexpr KindKey kRopeKeys[] = {
    {"model", "rope_theta", 10000.0, 0.0, false, "",
     "rotary embedding base theta (model.position = \"rope\"; Llama 2: 10000, Llama 3: 500000)",
     "learned positions have no rotary base", nullptr, &ModelShape::rope_theta},
};

// Its rule: it rotates pairs of features, so the head dimension hidden / heads is even.
inline std::vector<rules::Problem> rope_problems(const ModelShape& s) {
  if (s.heads < 1 || s.hidden % s.heads != 0 || (s.hidden / s.heads) % 2 == 0) return {};
  return {rules::Problem::statement(
      {"model.heads", s.heads},
      fmt::format("an even head dimension with {{model.position}}: rotary embeddings rotate pairs of features, "
                  "and model.hidden / model.heads = {} / {} = {} is odd",
                  s.hidden, s.heads, s.hidden / s.heads),
      {{"model.position", 0, "\"rope\""}})};
}
inline constexpr const char* kRopeBinds[] = {"hidden", "heads"};

inline constexpr SublayerKind kRope{SublayerSlot::position,
                                    "rope",
                                    "rotary embeddings of q and k, base model.rope_theta (Llama)",
                                    {},
                                    kRopeBuffers,
                                    nullptr,
                                    kRopeKeys,
                                    rope_problems,
                                    kRopeBinds,
                                    [](const ModelShape& s) { return fmt::format("RoPE theta {:g}", s.rope_theta); },
                                    true};

}  // namespace tptrain::model
