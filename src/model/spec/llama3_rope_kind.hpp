// Llama 3.1's scaled rotary positions (model.position = "llama3"; Hugging Face's rope_scaling
// {"rope_type": "llama3"}): RoPE (rope_kind.hpp) whose frequencies are interpolated by
// wavelength λ_i = 2π/ω_i against the pretraining context L = model.rope_original_max_positions:
// the high frequencies (λ < L / high_freq_factor) are kept, the low ones (λ > L / low_freq_factor)
// divided by the factor s = model.rope_factor, and the band between blended linearly in L/λ.
// Same tables, module and rule as RoPE's; only the frequencies differ.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "src/model/spec/rope_kind.hpp"

namespace tptrain::model {

inline constexpr KindKey kLlama3RopeKeys[] = {
    kRopeThetaKey,
    kRopeFactorKey,
    {"model", "rope_low_freq_factor", 1.0, 0.0, false, "",
     "Llama 3.1 RoPE: wavelengths above model.rope_original_max_positions / it are divided by model.rope_factor",
     "it is Llama 3.1's scaled RoPE's (model.position = \"llama3\")", nullptr, &ModelShape::rope_low_freq_factor},
    {"model", "rope_high_freq_factor", 4.0, 0.0, false, "",
     "Llama 3.1 RoPE: wavelengths below model.rope_original_max_positions / it are kept",
     "it is Llama 3.1's scaled RoPE's (model.position = \"llama3\")", nullptr, &ModelShape::rope_high_freq_factor},
    kRopeOriginalPositionsKey,
};

// Its rules: RoPE's, and a band between the two edges (Hugging Face refuses high <= low too).
inline std::vector<rules::Problem> llama3_rope_problems(const ModelShape& s) {
  std::vector<rules::Problem> out = rope_problems(s);
  if (!(s.rope_high_freq_factor > s.rope_low_freq_factor))
    out.push_back(rules::Problem::statement(
        {"model.rope_high_freq_factor", 0, fmt::format("{}", s.rope_high_freq_factor)},
        "above {model.rope_low_freq_factor}: the band of blended wavelengths lies between L / high and L / low",
        {{"model.rope_low_freq_factor", 0, fmt::format("{}", s.rope_low_freq_factor)}}));
  return out;
}

inline std::vector<double> llama3_rope_frequencies(const ModelShape& s, std::int64_t d) {
  std::vector<double> omega = rope_frequencies(s, d);
  const double L = s.rope_original_max_positions, low = s.rope_low_freq_factor, high = s.rope_high_freq_factor;
  for (double& w : omega) {
    const double wavelength = 2.0 * M_PI / w;
    if (wavelength < L / high) continue;
    if (wavelength > L / low) {
      w /= s.rope_factor;
      continue;
    }
    const double blend = (L / wavelength - low) / (high - low);
    w = (1.0 - blend) * w / s.rope_factor + blend * w;
  }
  return omega;
}

inline constexpr SublayerKind kLlama3Rope{
    SublayerSlot::position,
    "llama3",
    "RoPE with Llama 3.1's frequency scaling (model.rope_factor and the low/high frequency factors)",
    {},
    kRopeBuffers,
    nullptr,
    kLlama3RopeKeys,
    llama3_rope_problems,
    kRopeBinds,
    [](const ModelShape& s) {
      return fmt::format("Llama 3.1 RoPE theta {:g}, factor {:g} (frequency factors {:g}..{:g}, original {})",
                         s.rope_theta, s.rope_factor, s.rope_low_freq_factor, s.rope_high_freq_factor,
                         s.rope_original_max_positions);
    },
    true,
    {},
    {llama3_rope_frequencies, unit_amplitude}};

}  // namespace tptrain::model
