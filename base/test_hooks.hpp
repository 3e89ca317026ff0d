// The test hooks: behaviour that only a test wants (a job killed mid-write, layers that take a
// known time), kept in one struct so that production code reads a plain value and never the
// environment. Set once, before any work starts: by the hidden command-line option
// `--test-hook NAME=VALUE` (src/driver/main.cpp; tests/kill_resume.cmake, the bench tests) or
// by a unit test (TestHooksScope). It lives in base/ because its readers sit in io/ (the
// checkpoint writer) and src/ (the pipeline runner); kokkos_kernels/ cannot include it, so the
// attention path stays a kernels knob of its own (kokkos_kernels/attention_path.hpp;
// docs/design.md, "Test hooks").
#pragma once

#include <cstdint>
#include <string>

namespace tptrain {

struct TestHooks {
  // kill_in_checkpoint=STEP[@POINT]: SIGKILL the process while it writes the checkpoint of that
  // step (io/checkpoint_test_hooks.hpp), as a wall-clock limit would: at POINT "created" (the
  // temporary file made, nothing in it), "data" (halfway through the tensors; the default) or
  // "rename" (the file complete, not yet given its name). -1: never.
  std::int64_t kill_in_checkpoint = -1;
  std::string kill_in_checkpoint_at = "data";
  // fail_in_checkpoint=STEP: the write of that step's checkpoint fails on world rank 0 in its
  // data phase, as a full disk would (tests of the agreed error). -1: never.
  std::int64_t fail_in_checkpoint = -1;
  // checkpoint_seconds=T: every checkpoint write first sleeps T (on the writer's thread when
  // checkpoint.async), so that the next checkpoint finds it in flight. 0: none.
  double checkpoint_seconds = 0;
  // layer_seconds=T: every forward of a pipeline chunk also sleeps T per layer, every backward
  // 2T (src/train/pipeline_runner.hpp), so that the bubble can be measured on any machine. 0: none.
  double layer_seconds = 0;
  // spike_at_step=STEP: the gradients of that optimizer step (1-based) come out 1000 times too
  // large (src/train/training_run.cpp), a planted gradient-norm spike. -1: never.
  std::int64_t spike_at_step = -1;
  // nonfinite_from_step=STEP: from that step (1-based) on, every step's gradients are NaN. -1: never.
  std::int64_t nonfinite_from_step = -1;
  // slow_rank=RANK:SECONDS: world rank RANK sleeps SECONDS in every step, after reading its
  // batch and before the forward (src/train/training_run.cpp), so that the others wait for it:
  // a straggler. -1: none.
  int slow_rank = -1;
  double slow_rank_seconds = 0;
};

// The hooks in force (all off unless set).
const TestHooks& test_hooks();
// Replaces them. Call before the work starts (not thread-safe against readers).
void set_test_hooks(const TestHooks& hooks);

// Sets one hook from "NAME=VALUE"; throws std::invalid_argument naming the hook and what it
// expects ("--test-hook layer_seconds=x: expected seconds per layer from 0 to 60").
void parse_test_hook(const std::string& name_value, TestHooks& hooks);

// Sets the hooks for its lifetime, then puts the previous ones back (unit tests).
class TestHooksScope {
 public:
  explicit TestHooksScope(const TestHooks& hooks) : previous_(test_hooks()) { set_test_hooks(hooks); }
  ~TestHooksScope() { set_test_hooks(previous_); }
  TestHooksScope(const TestHooksScope&) = delete;
  TestHooksScope& operator=(const TestHooksScope&) = delete;

 private:
  TestHooks previous_;
};

}  // namespace tptrain
