// Rotary positions (model.position = "rope"; Su et al. 2021, Llama): q and k of each head rotated
// pairwise (rotate-half) by angles p · ω_i, ω_i = θ^(−2i/d), θ = model.rope_theta, so that their
// dot product depends on the positions' difference. No parameters; its tables and its forward and
// backward: src/model/rotary_position.hpp. The scaled kinds (llama3_rope_kind.hpp,
// yarn_rope_kind.hpp) are this one with other frequencies; they share its key, buffers and rule.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/model/spec/sublayer_kind.hpp"

namespace tptrain::model {

// The tables, computed once per stage (positions are global: the whole sequence's rows).
inline constexpr BufferRow kRopeBuffers[] = {
    {"rope.cos", "rotary table cos(p·ω_i)", {BufferDim::seq, BufferDim::d_2}, Element::fp32, Lifetime::scratch},
    {"rope.sin", "rotary table sin(p·ω_i)", {BufferDim::seq, BufferDim::d_2}, Element::fp32, Lifetime::scratch},
};

inline constexpr KindKey kRopeThetaKey{
    "model", "rope_theta", 10000.0, 0.0, false, "",
    "rotary embedding base theta (rotary positions; Llama 2: 10000, Llama 3: 500000)",
    "learned positions have no rotary base", nullptr, &ModelShape::rope_theta};
inline constexpr KindKey kRopeKeys[] = {kRopeThetaKey};
// The scaled kinds' keys (Hugging Face's rope_scaling "factor" and "original_max_position_embeddings").
inline constexpr KindKey kRopeFactorKey{
    "model", "rope_factor", 8.0, 1.0, true, "",
    "the context's scale factor of a scaled RoPE (model.position = \"llama3\" or \"yarn\"; Llama 3.1: 8, "
    "DeepSeek-V3: 40)",
    "unscaled positions have no scale factor", nullptr, &ModelShape::rope_factor};
inline constexpr KindKey kRopeOriginalPositionsKey{
    "model", "rope_original_max_positions", 8192.0, 1.0, true, "",
    "the context a scaled RoPE's model was pretrained with (llama3, yarn; Llama 3.1: 8192, DeepSeek-V3: 4096)",
    "unscaled positions have no original context", &ModelShape::rope_original_max_positions};

// Its rule (every rotary kind's): it rotates pairs of features, so the head dimension hidden /
// heads is even (multi-head latent attention rotates model.qk_rope_head_dim: its own rule).
inline std::vector<rules::Problem> rope_problems(const ModelShape& s) {
  if (s.latent_attention() || s.heads < 1 || s.hidden % s.heads != 0 || (s.hidden / s.heads) % 2 == 0) return {};
  return {rules::Problem::statement(
      {"model.heads", s.heads},
      fmt::format("an even head dimension with {{model.position}}: rotary embeddings rotate pairs of features, "
                  "and model.hidden / model.heads = {} / {} = {} is odd",
                  s.hidden, s.heads, s.hidden / s.heads),
      {{"model.position", 0, fmt::format("\"{}\"", s.position)}})};
}
inline constexpr const char* kRopeBinds[] = {"hidden", "heads"};

// RoPE's own frequencies θ^(−2i/d), which the scaled kinds start from.
inline std::vector<double> rope_frequencies(const ModelShape& s, std::int64_t d) {
  std::vector<double> omega(static_cast<std::size_t>(d / 2));
  for (std::size_t i = 0; i < omega.size(); ++i) omega[i] = std::pow(s.rope_theta, -2.0 * double(i) / double(d));
  return omega;
}
inline double unit_amplitude(const ModelShape&) { return 1.0; }

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
                                    true,
                                    {},
                                    {rope_frequencies, unit_amplitude}};

}  // namespace tptrain::model
