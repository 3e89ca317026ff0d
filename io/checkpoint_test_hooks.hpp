// Test hooks of the checkpoint writer, kept out of its code: tests/kill_resume.cmake needs a job
// that dies in the middle of writing a checkpoint, as one killed at its wall-clock limit would.
#pragma once

#include <cstdint>
#include <string>

namespace tptrain::io::detail {

// With the test hook kill_in_checkpoint (base/test_hooks.hpp; --test-hook
// kill_in_checkpoint=STEP[@POINT]) equal to `step` and `point`, kills the process with SIGKILL
// (no clean-up). Does nothing otherwise.
void kill_if_testing_crash_at_step(std::int64_t step, const char* point);

// With the test hook fail_in_checkpoint equal to `step`, on world rank 0: the error a failed
// write of the data would give; "" otherwise.
std::string failure_if_testing(std::int64_t step);

}  // namespace tptrain::io::detail
