// fp16's dynamic loss scaler against Megatron-LM's DynamicGradScaler update rule.
#include "src/train/loss_scaler.hpp"

#include <cmath>
#include <variant>
#include <vector>

#include "catch.hpp"
#include "io/deck.hpp"
#include "io/deck_keys.hpp"

using tptrain::train::DynamicLossScaler;
using tptrain::train::kMaxGrowthFactor;
using tptrain::train::kMaxLossScale;
using tptrain::train::kMinBackoffFactor;
using tptrain::train::LossScalerConfig;
using tptrain::train::LossScalerState;

namespace {

LossScalerConfig small_config() {
  LossScalerConfig c;
  c.initial = 1024.0;
  c.window = 3;
  c.hysteresis = 2;
  c.min = 1.0;
  return c;
}

}  // namespace

TEST_CASE("loss scaler: the defaults are the deck's and Megatron's", "[train][loss_scaler]") {
  const LossScalerConfig c;
  const tptrain::io::Deck d;
  CHECK(c.initial == 4294967296.0);
  CHECK(c.initial == d.training.loss_scale_initial);
  CHECK(c.window == d.training.loss_scale_window);
  CHECK(c.hysteresis == d.training.loss_scale_hysteresis);
  CHECK(c.min == d.training.loss_scale_min);
  CHECK(c.growth_factor == d.training.loss_scale_growth_factor);
  CHECK(c.backoff_factor == d.training.loss_scale_backoff_factor);
  const DynamicLossScaler s(c);
  CHECK(s.dynamic());
  CHECK(s.scale() == 4294967296.0);
  CHECK(s.inv_scale() == 1.0 / 4294967296.0);
  CHECK(s.get_state() == LossScalerState{4294967296.0, 0, 2});
}

TEST_CASE("loss scaler: with hysteresis 2 the first overflow only skips and the second halves",
          "[train][loss_scaler]") {
  DynamicLossScaler s(small_config());
  s.update(true);
  CHECK(s.scale() == 1024.0);  // skipped, scale kept
  CHECK(s.get_state() == LossScalerState{1024.0, 0, 1});
  s.update(true);
  CHECK(s.scale() == 512.0);
  s.update(true);  // the budget stays spent: every further overflow halves
  CHECK(s.scale() == 256.0);
  CHECK(s.get_state().hysteresis_tracker == -1);

  SECTION("clean steps in between do not refill the budget (only a growth does)") {
    DynamicLossScaler t(small_config());
    t.update(true);
    t.update(false);
    t.update(false);
    CHECK(t.scale() == 1024.0);
    t.update(true);  // second overflow since the start, not consecutive: halves
    CHECK(t.scale() == 512.0);
  }
}

TEST_CASE("loss scaler: the scale grows after `window` clean steps in a row", "[train][loss_scaler]") {
  DynamicLossScaler s(small_config());  // window 3
  s.update(false);
  s.update(false);
  CHECK(s.scale() == 1024.0);
  s.update(true);  // an overflow restarts the count (and spends one hysteresis)
  CHECK(s.get_state() == LossScalerState{1024.0, 0, 1});
  s.update(false);
  s.update(false);
  CHECK(s.scale() == 1024.0);
  s.update(false);
  CHECK(s.scale() == 2048.0);  // the third clean step in a row
  CHECK(s.get_state() == LossScalerState{2048.0, 0, 2});  // hysteresis refilled
  s.update(true);  // so one overflow only skips again
  CHECK(s.scale() == 2048.0);
  for (int i = 0; i < 3; ++i) s.update(false);
  CHECK(s.scale() == 4096.0);

  SECTION("other factors") {
    LossScalerConfig c = small_config();
    c.growth_factor = 1.5;
    c.backoff_factor = 0.25;
    c.hysteresis = 1;
    c.window = 1;
    DynamicLossScaler t(c);
    t.update(false);
    CHECK(t.scale() == 1536.0);
    t.update(true);
    CHECK(t.scale() == 384.0);
  }
}

TEST_CASE("loss scaler: the scale never shrinks below min", "[train][loss_scaler]") {
  LossScalerConfig c = small_config();
  c.initial = 4.0;
  c.min = 1.5;
  c.hysteresis = 1;
  DynamicLossScaler s(c);
  s.update(true);
  CHECK(s.scale() == 2.0);
  s.update(true);
  CHECK(s.scale() == 1.5);  // max(2 * 0.5, 1.5)
  s.update(true);
  CHECK(s.scale() == 1.5);
  for (int i = 0; i < 3; ++i) s.update(false);
  CHECK(s.scale() == 3.0);  // and grows from there
}

TEST_CASE("loss scaler: a saved state restores the scaler exactly", "[train][loss_scaler]") {
  DynamicLossScaler a(small_config());
  const std::vector<bool> before = {true, false, false, false, true, true, false};
  for (bool inf : before) a.update(inf);
  const LossScalerState saved = a.get_state();
  CHECK(saved == LossScalerState{1024.0, 1, 0});  // grown to 2048, halved back, one clean step

  DynamicLossScaler b(small_config());
  b.set_state(saved);
  CHECK(b.get_state() == saved);
  const std::vector<bool> after = {false, false, true, false, false, false, true, true};
  for (bool inf : after) {
    a.update(inf);
    b.update(inf);
    CHECK(a.get_state() == b.get_state());
  }

  SECTION("a state saved under a larger window still grows under a smaller one") {
    LossScalerConfig c = small_config();
    c.window = 2;
    DynamicLossScaler d(c);
    d.set_state(LossScalerState{64.0, 5, 2});
    d.update(false);
    CHECK(d.get_state() == LossScalerState{128.0, 0, 2});
  }
  SECTION("impossible states are refused") {
    CHECK_THROWS_AS(b.set_state(LossScalerState{0.0, 0, 2}), std::invalid_argument);
    CHECK_THROWS_AS(b.set_state(LossScalerState{-1.0, 0, 2}), std::invalid_argument);
    CHECK_THROWS_AS(b.set_state(LossScalerState{1.0, -1, 2}), std::invalid_argument);
  }
}

TEST_CASE("loss scaler: the scale never grows above 2^64 (Megatron's would reach Inf)", "[train][loss_scaler]") {
  CHECK(kMaxLossScale == 18446744073709551616.0);
  LossScalerConfig c;  // from 2^32
  c.window = 1;
  SECTION("the largest growth factor") {
    c.growth_factor = kMaxGrowthFactor;
    DynamicLossScaler s(c);
    const std::vector<double> expected = {0x1p42, 0x1p52, 0x1p62, 0x1p64, 0x1p64};
    for (double e : expected) {
      s.update(false);
      CHECK(s.scale() == e);
    }
  }
  SECTION("the default growth, for longer than it takes 2^32 to reach Inf") {
    DynamicLossScaler s(c);
    for (int i = 0; i < 2000; ++i) s.update(false);
    CHECK(s.scale() == kMaxLossScale);
    CHECK(s.get_state().scale == kMaxLossScale);  // what a checkpoint stores
    s.update(true);
    s.update(true);  // hysteresis 2: the second overflow halves, from the ceiling
    CHECK(s.scale() == 0x1p63);
  }
}

TEST_CASE("loss scaler: a restored scale is clamped to [min, 2^64]", "[train][loss_scaler]") {
  LossScalerConfig c;
  c.min = 0x1p30;  // raised above what the checkpoint's run used
  DynamicLossScaler s(c);
  s.set_state(LossScalerState{0x1p24, 3, 1});
  CHECK(s.get_state() == LossScalerState{0x1p30, 3, 1});
  s.set_state(LossScalerState{1e300, 0, 2});
  CHECK(s.scale() == kMaxLossScale);
  s.set_state(LossScalerState{0x1p40, 0, 2});  // in range: as saved
  CHECK(s.scale() == 0x1p40);
  SECTION("a scale that is not a finite number > 0 is refused, saying so") {
    CHECK_THROWS_WITH(s.set_state(LossScalerState{INFINITY, 0, 2}),
                      tptrain::test::contains("inf: expected a finite loss scale > 0"));
    CHECK_THROWS_WITH(s.set_state(LossScalerState{NAN, 0, 2}), tptrain::test::contains("nan: expected"));
    CHECK(s.scale() == 0x1p40);  // unchanged
  }
}

// The deck validates these keys first (io/ does not include src/); its ranges must be the
// scaler's, or a deck could pass and the scaler refuse it (or the reverse).
TEST_CASE("loss scaler: the deck's ranges of the loss-scale keys are the scaler's", "[train][loss_scaler]") {
  using tptrain::io::NumberRange;
  const auto range = [](const char* key) {
    const tptrain::io::DeckKey* k = tptrain::io::find_deck_key("training", key);
    REQUIRE(k != nullptr);
    REQUIRE(std::holds_alternative<NumberRange>(k->rule));
    return std::get<NumberRange>(k->rule);
  };
  const NumberRange initial = range("loss_scale_initial"), growth = range("loss_scale_growth_factor"),
                    backoff = range("loss_scale_backoff_factor");
  CHECK((initial.lo == 0 && !initial.lo_inclusive && initial.hi == kMaxLossScale && initial.hi_inclusive));
  CHECK((growth.lo == 1 && !growth.lo_inclusive && growth.hi == kMaxGrowthFactor && growth.hi_inclusive));
  CHECK((backoff.lo == kMinBackoffFactor && backoff.lo_inclusive && backoff.hi == 1.0 && !backoff.hi_inclusive));
  // And the scaler takes the edges the deck takes.
  LossScalerConfig c;
  c.initial = kMaxLossScale;
  c.growth_factor = kMaxGrowthFactor;
  c.backoff_factor = kMinBackoffFactor;
  CHECK_NOTHROW(DynamicLossScaler(c));
}

TEST_CASE("loss scaler: constant() for fp32 and bf16 keeps scale 1", "[train][loss_scaler]") {
  DynamicLossScaler s = DynamicLossScaler::constant();
  CHECK_FALSE(s.dynamic());
  CHECK(s.scale() == 1.0);
  for (int i = 0; i < 5000; ++i) s.update(i % 3 == 0);
  CHECK(s.scale() == 1.0);
  CHECK(s.inv_scale() == 1.0);
  CHECK(DynamicLossScaler::constant(128.0).scale() == 128.0);
}

TEST_CASE("loss scaler: invalid configurations are refused", "[train][loss_scaler]") {
  auto with = [](auto change) {
    LossScalerConfig c;
    change(c);
    return c;
  };
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.initial = 0; })), std::invalid_argument);
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.min = 0; })), std::invalid_argument);
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.min = 2 * c.initial; })),
                  std::invalid_argument);
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.growth_factor = 1; })),
                  std::invalid_argument);
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.backoff_factor = 1; })),
                  std::invalid_argument);
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.backoff_factor = 0; })),
                  std::invalid_argument);
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.growth_factor = 1e308; })),
                  std::invalid_argument);
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.growth_factor = NAN; })),
                  std::invalid_argument);
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.backoff_factor = 1e-300; })),
                  std::invalid_argument);
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.initial = 0x1p65; })),
                  std::invalid_argument);
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.window = 0; })), std::invalid_argument);
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.hysteresis = 0; })),
                  std::invalid_argument);
  CHECK_THROWS_WITH(DynamicLossScaler(with([](LossScalerConfig& c) { c.window = 0; })),
                    tptrain::test::contains("window"));
}
