// Loss-spike skipping (training.skip_spikes; llm.c's -sl/-sg and its OutlierDetector): an
// optimizer step whose loss or gradient norm lies more than `zscore` standard deviations above
// the mean of the last `window` accepted steps, or is not finite, does not update the weights.
//
// - Judged once the window is full (the first `window` accepted steps are its warm-up); a
//   non-finite loss or norm is skipped from the first step on.
// - Only accepted steps enter the window: a spike does not widen the band that judges the next.
// - The decision reads the loss and the gradient norm, global reductions that every rank holds
//   bit for bit, so every rank skips the same steps without a further collective.
// - The data order is unchanged: the sampler is a pure function of (seed, step), so a skipped
//   step's batch is consumed, not retried.
// - The window is part of the run's state (/train attributes of the checkpoint, as the values'
//   bit patterns), so a resumed run judges as the uninterrupted one does.
// Host-only, no MPI: the training run owns one.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace tptrain::train {

struct SpikeConfig {
  double zscore = 6.0;
  int window = 100;
};

class SpikeDetector {
 public:
  explicit SpikeDetector(SpikeConfig config) : config_(config) {
    if (config_.window < 2 || !(config_.zscore > 0))
      throw std::invalid_argument("tptrain: spike detector: window >= 2 and zscore > 0 expected");
  }

  // "" if the step may update the weights, else why not ("the gradient norm 41.2 is 9.3 standard
  // deviations above the mean 0.52 of the last 100 accepted steps").
  std::string judge(double loss, double grad_norm) const {
    if (!std::isfinite(loss) || !std::isfinite(grad_norm))
      return fmt::format("the loss is {} and the gradient norm {}: not finite", loss, grad_norm);
    if (static_cast<int>(losses_.size()) < config_.window) return {};
    if (std::string why = outlier("loss", loss, losses_); !why.empty()) return why;
    return outlier("gradient norm", grad_norm, norms_);
  }

  // An accepted step enters the window (the oldest leaves) and ends a run of skips.
  void accept(double loss, double grad_norm) {
    losses_.push_back(loss);
    norms_.push_back(grad_norm);
    if (static_cast<int>(losses_.size()) > config_.window) {
      losses_.pop_front();
      norms_.pop_front();
    }
    skipped_in_a_row_ = 0;
  }
  // A skipped step; returns how many in a row that makes (training.max_skipped_steps of them
  // stop the run: the training run's decision).
  int skip() { return ++skipped_in_a_row_; }
  int skipped_in_a_row() const { return skipped_in_a_row_; }

  // The state as /train attributes (int64: the doubles' bit patterns).
  std::map<std::string, std::int64_t> state() const {
    std::map<std::string, std::int64_t> out{{"spike_window_size", static_cast<std::int64_t>(losses_.size())},
                                            {"spike_skipped_in_a_row", skipped_in_a_row_}};
    for (std::size_t i = 0; i < losses_.size(); ++i) {
      out[fmt::format("spike_loss_{:04}", i)] = bits_of(losses_[i]);
      out[fmt::format("spike_norm_{:04}", i)] = bits_of(norms_[i]);
    }
    return out;
  }
  // Restores state(); false (nothing changed) for a checkpoint without it. Throws
  // std::invalid_argument naming the attribute for an inconsistent one.
  bool restore(const std::map<std::string, std::int64_t>& saved) {
    const auto size = saved.find("spike_window_size");
    const auto in_a_row = saved.find("spike_skipped_in_a_row");
    if (size == saved.end() || in_a_row == saved.end()) return false;
    if (size->second < 0 || in_a_row->second < 0)
      throw std::invalid_argument("/train attributes spike_window_size and spike_skipped_in_a_row: expected >= 0");
    std::deque<double> losses, norms;
    for (std::int64_t i = 0; i < size->second; ++i) {
      const auto l = saved.find(fmt::format("spike_loss_{:04}", i));
      const auto n = saved.find(fmt::format("spike_norm_{:04}", i));
      if (l == saved.end() || n == saved.end())
        throw std::invalid_argument(fmt::format("/train attribute spike_loss_{:04} or spike_norm_{:04} is missing "
                                                "(spike_window_size = {})",
                                                i, i, size->second));
      losses.push_back(double_of(l->second));
      norms.push_back(double_of(n->second));
    }
    // A window saved by a run with a larger training.spike_window keeps its newest values.
    while (static_cast<int>(losses.size()) > config_.window) {
      losses.pop_front();
      norms.pop_front();
    }
    losses_ = std::move(losses);
    norms_ = std::move(norms);
    skipped_in_a_row_ = static_cast<int>(in_a_row->second);
    return true;
  }

 private:
  // Population mean and standard deviation of the window; a flat window (deviation 0) judges
  // nothing, as llm.c's detector returns no z-score then.
  std::string outlier(const char* what, double x, const std::deque<double>& window) const {
    double mean = 0;
    for (double v : window) mean += v;
    mean /= static_cast<double>(window.size());
    double var = 0;
    for (double v : window) var += (v - mean) * (v - mean);
    const double sd = std::sqrt(var / static_cast<double>(window.size()));
    if (!(sd > 0)) return {};
    const double z = (x - mean) / sd;
    if (z <= config_.zscore) return {};
    return fmt::format("the {} {:.6g} is {:.1f} standard deviations above the mean {:.6g} of the last {} accepted "
                       "steps (training.spike_zscore = {:g})",
                       what, x, z, mean, window.size(), config_.zscore);
  }
  static std::int64_t bits_of(double v) {
    std::int64_t b = 0;
    std::memcpy(&b, &v, sizeof b);
    return b;
  }
  static double double_of(std::int64_t b) {
    double v = 0;
    std::memcpy(&v, &b, sizeof v);
    return v;
  }

  SpikeConfig config_;
  std::deque<double> losses_, norms_;
  int skipped_in_a_row_ = 0;
};

}  // namespace tptrain::train
