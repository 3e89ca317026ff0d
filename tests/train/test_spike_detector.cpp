// The spike detector (src/train/spike_detector.hpp) against a naive z-score: judged only once
// the window is full, only accepted steps enter it, non-finite values always skip, and its
// state round-trips through /train attributes bit for bit.
#include "src/train/spike_detector.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "catch.hpp"

using tptrain::train::SpikeConfig;
using tptrain::train::SpikeDetector;

namespace {
// (x - mean) / sd over `w`, the population standard deviation, computed the plain way.
double zscore(double x, const std::vector<double>& w) {
  double m = 0, v = 0;
  for (double a : w) m += a;
  m /= static_cast<double>(w.size());
  for (double a : w) v += (a - m) * (a - m);
  return (x - m) / std::sqrt(v / static_cast<double>(w.size()));
}
}  // namespace

TEST_CASE("spike detector: a z-score above the threshold skips, once the window is full", "[train]") {
  SpikeDetector d(SpikeConfig{3.0, 4});
  const std::vector<double> losses = {2.0, 2.1, 1.9, 2.05};
  const std::vector<double> norms = {1.0, 1.2, 0.9, 1.1};
  // The warm-up: even a huge value is accepted while the window fills.
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(d.judge(losses[i], norms[i]).empty());
    d.accept(losses[i], norms[i]);
  }
  CHECK(d.judge(100.0, 1.0).empty());
  d.accept(losses[3], norms[3]);
  // Full: the threshold is the naive z-score's.
  // 2.99 standard deviations above the window's mean, by the naive formula.
  const double mean = 2.0125;
  double var = 0;
  for (double l : losses) var += (l - mean) * (l - mean);
  const double just_below = mean + 2.99 * std::sqrt(var / 4);
  REQUIRE(zscore(just_below, losses) == Approx(2.99));
  CHECK(d.judge(just_below, 1.0).empty());
  const std::string loss_spike = d.judge(2.0125 + 0.5, 1.0);
  INFO(loss_spike);
  CHECK(zscore(2.5125, losses) > 3.0);
  CHECK_THAT(loss_spike, Catch::Matchers::Contains("the loss 2.5125 is") &&
                             Catch::Matchers::Contains("standard deviations above the mean 2.0125 of the last 4"));
  CHECK_THAT(d.judge(2.0, 5.0), Catch::Matchers::Contains("the gradient norm 5 is"));
  // A skip does not enter the window; an accept ends the run of skips.
  CHECK(d.skip() == 1);
  CHECK(d.skip() == 2);
  CHECK_THAT(d.judge(2.0, 5.0), Catch::Matchers::Contains("gradient norm"));
  d.accept(2.0, 1.0);
  CHECK(d.skipped_in_a_row() == 0);
}

TEST_CASE("spike detector: non-finite values always skip, a flat window judges nothing", "[train]") {
  SpikeDetector d(SpikeConfig{6.0, 2});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_THAT(d.judge(1.0, nan), Catch::Matchers::Contains("not finite"));
  CHECK_THAT(d.judge(std::numeric_limits<double>::infinity(), 1.0), Catch::Matchers::Contains("not finite"));
  d.accept(1.0, 1.0);
  d.accept(1.0, 1.0);
  CHECK(d.judge(50.0, 50.0).empty());  // deviation 0: no z-score, as llm.c's detector
  CHECK_THROWS(SpikeDetector(SpikeConfig{6.0, 1}));
  CHECK_THROWS(SpikeDetector(SpikeConfig{0.0, 4}));
}

TEST_CASE("spike detector: the state round-trips bit for bit and keeps the newest of a longer window", "[train]") {
  SpikeDetector a(SpikeConfig{3.0, 5});
  for (int i = 0; i < 7; ++i) a.accept(0.1 * i + 1.0 / 3.0, 0.7 + 0.01 * i);
  a.skip();
  SpikeDetector b(SpikeConfig{3.0, 5});
  REQUIRE(b.restore(a.state()));
  CHECK(b.state() == a.state());
  CHECK(b.skipped_in_a_row() == 1);
  CHECK(b.judge(10.0, 0.72) == a.judge(10.0, 0.72));
  SpikeDetector shorter(SpikeConfig{3.0, 3});
  REQUIRE(shorter.restore(a.state()));
  CHECK(shorter.state().at("spike_window_size") == 3);
  CHECK(shorter.state().at("spike_loss_0000") == a.state().at("spike_loss_0002"));
  CHECK_FALSE(SpikeDetector(SpikeConfig{}).restore({{"step", 4}}));
  auto broken = a.state();
  broken.erase("spike_norm_0003");
  CHECK_THROWS_WITH(SpikeDetector(SpikeConfig{}).restore(broken), Catch::Matchers::Contains("spike_norm_0003"));
}
