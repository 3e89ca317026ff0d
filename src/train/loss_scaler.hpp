// fp16's dynamic loss scaling (Micikevicius et al. 2018, "Mixed Precision Training"), with the
// update rule of Megatron-LM's DynamicGradScaler (megatron/core/optimizer/grad_scaler.py).
//
// fp16 has 5 exponent bits: gradients below 2^-24 flush to zero. The trainer multiplies the loss by
// scale() before the backward pass and the fp32 master gradients by 1 / scale() before clipping
// and the optimizer. A step whose gradients hold an Inf or NaN (found_inf, agreed on by every rank)
// is skipped, and update(found_inf) then adapts the scale:
//   - overflow: the growth count restarts; the `hysteresis`-th overflow since the last growth (or
//     the start; clean steps in between do not refill the budget) and every later one multiply
//     the scale by backoff_factor, never below min;
//   - `window` clean steps in a row: the scale grows by growth_factor, never above kMaxLossScale,
//     and the hysteresis budget is refilled.
// The scale starts high (2^32) and settles just below the overflow threshold within a few dozen
// skipped steps. It is always a finite number in [min, kMaxLossScale]: Megatron's scaler has no
// ceiling, so a model whose gradients never overflow grows it to Inf (2^1024 after 992 growths),
// where every step overflows and nothing trains.
//
// fp32 and bf16 need no scaling (bf16 has fp32's 8 exponent bits; Megatron runs bf16 without a
// scaler): DynamicLossScaler::constant() is a scaler whose scale stays 1 and whose update() does
// nothing, so the trainer can run one code path for every precision.
//
// get_state()/set_state() are what a checkpoint stores (Megatron's state_dict: scale,
// growth_tracker, hysteresis_tracker), so that a resumed run continues with the same scale.
//
// Plain C++: no Kokkos, no MPI. The scale is a double (Megatron keeps an fp32 tensor); with the
// default power-of-two factors every value is exact in both.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace tptrain::train {

// The ceiling of the scale, 2^64. The trainer hands S to fp32 arithmetic (S / tokens seeds the
// backward, 1 / S multiplies the gradients in AdamW), so S must stay far inside fp32's range:
// 2^64 leaves a factor 2^64 below FLT_MAX (2^128) for the scaled gradients. And a larger scale
// would serve nothing: the scale only grows while nothing overflows, and at S = 2^64 a gradient
// the fp16 backward carries without overflow (< 65504 < 2^16) is below 2^-48 unscaled, 2^21 below
// AdamW's eps (1e-8), where AdamW moves a weight by less than lr / 2^21. The growth stops there
// instead of running on to Inf.
inline constexpr double kMaxLossScale = 0x1p64;
// The factors' ranges (the deck's, io/deck_keys.cpp). A growth above 2^10 would cross fp16's
// whole exponent range (2^-24 to 2^16, 2^40) in four growths, a backoff below 2^-10 in four
// overflows: that is a typo, not a tuning (Megatron and PyTorch use 2 and 0.5).
inline constexpr double kMaxGrowthFactor = 1024.0;
inline constexpr double kMinBackoffFactor = 1.0 / 1024.0;

// From the deck's training.loss_scale_* keys (io/deck_keys.cpp); these defaults are the deck's
// and Megatron's.
struct LossScalerConfig {
  double initial = 4294967296.0;  // 2^32
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t window = 1000;   // clean steps before the scale grows (Megatron: growth_interval)
  std::int64_t hysteresis = 2;  // overflows tolerated before the scale shrinks
  double min = 1.0;
};

// What a checkpoint stores.
struct LossScalerState {
  double scale = 1.0;
  std::int64_t growth_tracker = 0;      // clean steps since the last overflow or growth
  std::int64_t hysteresis_tracker = 0;  // overflows left before the scale shrinks (may go below 0)
};

inline bool operator==(const LossScalerState& a, const LossScalerState& b) {
  return a.scale == b.scale && a.growth_tracker == b.growth_tracker &&
         a.hysteresis_tracker == b.hysteresis_tracker;
}
inline bool operator!=(const LossScalerState& a, const LossScalerState& b) { return !(a == b); }

class DynamicLossScaler {
 public:
  // Checks the configuration as Megatron's constructor asserts it (the deck checks it first, so
  // this only fires for a hand-built config): std::invalid_argument naming the field.
  explicit DynamicLossScaler(const LossScalerConfig& config) : config_(config) {
    auto require = [](bool ok, const std::string& what) {
      if (!ok) throw std::invalid_argument("tptrain: DynamicLossScaler: " + what);
    };
    // std::isfinite first: an ordered comparison with NaN raises FE_INVALID.
    require(std::isfinite(config.initial) && config.initial > 0 && config.initial <= kMaxLossScale,
            "initial scale must be in (0, 2^64]");
    require(std::isfinite(config.min) && config.min > 0, "min scale must be a finite number > 0");
    require(config.min <= config.initial, "min scale must be <= the initial scale");
    require(std::isfinite(config.growth_factor) && config.growth_factor > 1 &&
                config.growth_factor <= kMaxGrowthFactor,
            "growth_factor must be in (1, 1024]");
    require(std::isfinite(config.backoff_factor) && config.backoff_factor >= kMinBackoffFactor &&
                config.backoff_factor < 1,
            "backoff_factor must be in [1/1024, 1)");
    require(config.window >= 1, "window must be >= 1");
    require(config.hysteresis >= 1, "hysteresis must be >= 1");
    state_.scale = config.initial;
    state_.growth_tracker = 0;
    state_.hysteresis_tracker = config.hysteresis;
  }

  // For fp32 and bf16: scale() is `scale` (1: the loss and gradients are used as they are) and
  // update() changes nothing.
  static DynamicLossScaler constant(double scale = 1.0) {
    LossScalerConfig c;
    c.initial = scale;
    c.min = scale;
    DynamicLossScaler s(c);
    s.dynamic_ = false;
    return s;
  }

  bool dynamic() const { return dynamic_; }
  double scale() const { return state_.scale; }
  double inv_scale() const { return 1.0 / state_.scale; }
  const LossScalerConfig& config() const { return config_; }

  // After every optimizer step (taken or skipped), with whether any rank found an Inf/NaN
  // gradient. The growth test is `>=` where Megatron has `==`: the same for every state reached
  // under one configuration, and a state restored under a smaller window still grows.
  void update(bool found_inf) {
    if (!dynamic_) return;
    if (found_inf) {
      state_.growth_tracker = 0;
      state_.hysteresis_tracker -= 1;
      if (state_.hysteresis_tracker <= 0)
        state_.scale = std::max(state_.scale * config_.backoff_factor, config_.min);
    } else {
      state_.growth_tracker += 1;
      if (state_.growth_tracker >= config_.window) {
        state_.growth_tracker = 0;
        state_.hysteresis_tracker = config_.hysteresis;
        state_.scale = std::min(state_.scale * config_.growth_factor, kMaxLossScale);
      }
    }
  }

  LossScalerState get_state() const { return state_; }
  // Restores a checkpoint's state (the configuration stays this scaler's, so a resumed run may
  // change the window, the factors or min). The scale is clamped to [min, kMaxLossScale]: a run
  // resumed with a raised min starts at that min, not below the range it promises. Throws
  // std::invalid_argument, saying what was expected, for a state no scaler reaches (the caller
  // names the checkpoint and the attribute).
  void set_state(const LossScalerState& state) {
    if (!(std::isfinite(state.scale) && state.scale > 0))
      throw std::invalid_argument(fmt_scale(state.scale) + ": expected a finite loss scale > 0");
    if (state.growth_tracker < 0)
      throw std::invalid_argument(std::to_string(state.growth_tracker) + ": expected a growth count >= 0");
    state_ = state;
    state_.scale = std::min(std::max(state.scale, config_.min), kMaxLossScale);
  }

 private:
  static std::string fmt_scale(double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", x);
    return text;
  }

  LossScalerConfig config_;
  LossScalerState state_;
  bool dynamic_ = true;
};

}  // namespace tptrain::train
