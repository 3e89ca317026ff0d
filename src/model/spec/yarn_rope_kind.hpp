// YaRN's scaled rotary positions (model.position = "yarn"; Peng et al. 2023, DeepSeek-V3; Hugging
// Face's rope_scaling {"rope_type": "yarn"}): RoPE (rope_kind.hpp) whose frequency i is blended
// from its interpolated value ω_i / s (s = model.rope_factor) and its own, ω_i, by a ramp over the
// pair index between the pairs that turn β_fast and β_slow times within the pretraining context L
// (model.rope_original_max_positions): r_i = clamp((i − low) / (high − low), 0, 1),
// ω'_i = ω_i / s · r_i + ω_i · (1 − r_i), low = ⌊d ln(L / 2πβ_fast) / 2 ln θ⌋ ≥ 0,
// high = ⌈d ln(L / 2πβ_slow) / 2 ln θ⌉ ≤ d − 1. Its tables carry the attention factor
// m(s, mscale) / m(s, mscale_all_dim), or m(s, 1) when either is not given, m(s, μ) = 0.1 μ ln s + 1
// (1 for s <= 1): q·k grows by its square, as Hugging Face's and DeepSeek's. (DeepSeek's
// attention also scales its softmax by m(s, mscale_all_dim)²: that is the attention kind's, MLA's.)
// Same tables, module and rule as RoPE's; only the frequencies and the amplitude differ.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "src/model/spec/rope_kind.hpp"

namespace tptrain::model {

inline constexpr KindKey kYarnRopeKeys[] = {
    kRopeThetaKey,
    kRopeFactorKey,
    kRopeOriginalPositionsKey,
    {"model", "rope_beta_fast", 32.0, 0.0, false, "",
     "YaRN: pairs turning more than this many times within the original context keep their frequency",
     "it is YaRN's (model.position = \"yarn\")", nullptr, &ModelShape::rope_beta_fast},
    {"model", "rope_beta_slow", 1.0, 0.0, false, "",
     "YaRN: pairs turning fewer than this many times within the original context are interpolated",
     "it is YaRN's (model.position = \"yarn\")", nullptr, &ModelShape::rope_beta_slow},
    {"model", "rope_mscale", 0.0, 0.0, true, "(0 = not given)",
     "YaRN: the attention factor's magnitude, m(factor, mscale) / m(factor, mscale_all_dim)",
     "it is YaRN's (model.position = \"yarn\")", nullptr, &ModelShape::rope_mscale},
    {"model", "rope_mscale_all_dim", 0.0, 0.0, true, "(0 = not given)",
     "YaRN: the attention factor's divisor's magnitude (DeepSeek-V3: 1, with model.rope_mscale = 1)",
     "it is YaRN's (model.position = \"yarn\")", nullptr, &ModelShape::rope_mscale_all_dim},
};

// YaRN's magnitude m(s, μ).
inline double yarn_magnitude(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}
inline double yarn_attention_factor(const ModelShape& s) {
  if (s.rope_mscale > 0 && s.rope_mscale_all_dim > 0)
    return yarn_magnitude(s.rope_factor, s.rope_mscale) / yarn_magnitude(s.rope_factor, s.rope_mscale_all_dim);
  return yarn_magnitude(s.rope_factor, 1.0);
}

inline std::vector<double> yarn_rope_frequencies(const ModelShape& s, std::int64_t d) {
  std::vector<double> omega = rope_frequencies(s, d);
  // The pair index that turns `turns` times within the original context L.
  const auto pair_turning = [&](double turns) {
    return double(d) * std::log(s.rope_original_max_positions / (turns * 2.0 * M_PI)) / (2.0 * std::log(s.rope_theta));
  };
  const double low = std::max(std::floor(pair_turning(s.rope_beta_fast)), 0.0);
  double high = std::min(std::ceil(pair_turning(s.rope_beta_slow)), double(d - 1));
  if (low == high) high += 0.001;  // as the reference implementations: no division by zero
  for (std::size_t i = 0; i < omega.size(); ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    omega[i] = omega[i] / s.rope_factor * ramp + omega[i] * (1.0 - ramp);
  }
  return omega;
}

inline constexpr SublayerKind kYarnRope{
    SublayerSlot::position,
    "yarn",
    "RoPE with YaRN's frequency scaling and attention factor (model.rope_factor, the betas, the mscales; "
    "DeepSeek-V3)",
    {},
    kRopeBuffers,
    nullptr,
    kYarnRopeKeys,
    rope_problems,
    kRopeBinds,
    [](const ModelShape& s) {
      return fmt::format("YaRN RoPE theta {:g}, factor {:g} (beta {:g}/{:g}, original {}, attention factor {:.4g})",
                         s.rope_theta, s.rope_factor, s.rope_beta_fast, s.rope_beta_slow,
                         s.rope_original_max_positions, yarn_attention_factor(s));
    },
    true,
    {},
    {yarn_rope_frequencies, yarn_attention_factor}};

}  // namespace tptrain::model
