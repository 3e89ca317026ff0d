// fp16's dynamic loss scaler against Megatron-LM's DynamicGradScaler update rule.
#include "src/train/loss_scaler.hpp"

#include <vector>

#include "catch.hpp"
#include "io/deck.hpp"

using tptrain::train::DynamicLossScaler;
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
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.window = 0; })), std::invalid_argument);
  CHECK_THROWS_AS(DynamicLossScaler(with([](LossScalerConfig& c) { c.hysteresis = 0; })),
                  std::invalid_argument);
  CHECK_THROWS_WITH(DynamicLossScaler(with([](LossScalerConfig& c) { c.window = 0; })),
                    tptrain::test::contains("window"));
}
