// The test hooks (base/test_hooks.hpp): what --test-hook accepts, what it refuses and how it
// says so, and that a scope puts the previous hooks back.
#include <stdexcept>
#include <string>

#include "base/test_hooks.hpp"
#include "catch.hpp"

using tptrain::parse_test_hook;
using tptrain::TestHooks;

namespace {
std::string refusal(const std::string& name_value) {
  TestHooks h;
  try {
    parse_test_hook(name_value, h);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}
}  // namespace

TEST_CASE("test hooks: parsed from NAME=VALUE", "[base][test_hooks]") {
  TestHooks h;
  CHECK(h.kill_in_checkpoint == -1);
  CHECK(h.layer_seconds == 0);
  parse_test_hook("kill_in_checkpoint=4", h);
  parse_test_hook("layer_seconds=0.01", h);
  CHECK(h.kill_in_checkpoint == 4);
  CHECK(h.kill_in_checkpoint_at == "data");
  CHECK(h.layer_seconds == 0.01);
  parse_test_hook("kill_in_checkpoint=6@rename", h);
  CHECK(h.kill_in_checkpoint == 6);
  CHECK(h.kill_in_checkpoint_at == "rename");
  CHECK(h.fail_in_checkpoint == -1);
  parse_test_hook("fail_in_checkpoint=2", h);
  CHECK(h.fail_in_checkpoint == 2);
  parse_test_hook("checkpoint_seconds=0.5", h);
  CHECK(h.checkpoint_seconds == 0.5);
  CHECK(refusal("checkpoint_seconds=-1").find("from 0 to 60") != std::string::npos);
}

TEST_CASE("test hooks: a bad one names the hook and what it expects", "[base][test_hooks]") {
  CHECK(refusal("kill_in_checkpoint=x") ==
        "--test-hook kill_in_checkpoint=x: expected kill_in_checkpoint=STEP[@POINT], a checkpoint's step (an "
        "integer >= 0) and where: created, data or rename");
  CHECK(refusal("kill_in_checkpoint=3@later").find("created, data or rename") != std::string::npos);
  CHECK(refusal("fail_in_checkpoint=x").find("fail_in_checkpoint=STEP") != std::string::npos);
  CHECK(refusal("kill_in_checkpoint=-1").find("an integer >= 0") != std::string::npos);
  CHECK(refusal("kill_in_checkpoint").find("kill_in_checkpoint=STEP") != std::string::npos);
  CHECK(refusal("layer_seconds=61") ==
        "--test-hook layer_seconds=61: expected layer_seconds=T, seconds per layer from 0 to 60");
  CHECK(refusal("layer_seconds=nan").find("from 0 to 60") != std::string::npos);
  CHECK(refusal("layer_second=1") ==
        "--test-hook layer_second=1: expected NAME=VALUE with NAME one of kill_in_checkpoint, fail_in_checkpoint, "
            "checkpoint_seconds, layer_seconds, spike_at_step, nonfinite_from_step, slow_rank");
  CHECK(refusal("spike_at_step=0") ==
        "--test-hook spike_at_step=0: expected spike_at_step=STEP, an optimizer step (an integer >= 1)");
  CHECK(refusal("nonfinite_from_step=x").find("nonfinite_from_step=STEP") != std::string::npos);
  TestHooks h;
  tptrain::parse_test_hook("spike_at_step=7", h);
  tptrain::parse_test_hook("nonfinite_from_step=3", h);
  CHECK(h.spike_at_step == 7);
  CHECK(h.nonfinite_from_step == 3);
  tptrain::parse_test_hook("slow_rank=1:0.25", h);
  CHECK(h.slow_rank == 1);
  CHECK(h.slow_rank_seconds == 0.25);
  CHECK(refusal("slow_rank=1").find("slow_rank=RANK:SECONDS") != std::string::npos);
  CHECK(refusal("slow_rank=1:0").find("slow_rank=RANK:SECONDS") != std::string::npos);
}

TEST_CASE("test hooks: a scope sets them and puts the previous ones back", "[base][test_hooks]") {
  CHECK(tptrain::test_hooks().layer_seconds == 0);
  {
    TestHooks h;
    h.layer_seconds = 0.5;
    const tptrain::TestHooksScope scope(h);
    CHECK(tptrain::test_hooks().layer_seconds == 0.5);
  }
  CHECK(tptrain::test_hooks().layer_seconds == 0);
}
