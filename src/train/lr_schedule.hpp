// Learning rate at an optimizer step: linear warmup to lr over warmup_steps, then decay to
// min_lr at the last step ("cosine", "linear") or stay at lr ("constant").
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

namespace tptrain::train {

// Values from the deck ([optimizer], training.steps); defaults live in io/deck_keys.cpp.
struct LrSchedule {
  double lr{};
  double min_lr{};
  std::int64_t warmup_steps{};
  std::int64_t total_steps{};
  std::string decay;

  // step: 0-based index of the optimizer step about to be taken.
  double at(std::int64_t step) const {
    if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
    if (decay == "constant") return lr;
    const std::int64_t span = total_steps - warmup_steps;
    const double progress = span <= 1 ? 1.0
                                      : static_cast<double>(step - warmup_steps) / static_cast<double>(span - 1);
    const double p = progress > 1.0 ? 1.0 : progress;
    const double factor = decay == "linear" ? 1.0 - p : 0.5 * (1.0 + std::cos(M_PI * p));
    return min_lr + factor * (lr - min_lr);
  }
};

}  // namespace tptrain::train
