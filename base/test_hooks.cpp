#include "base/test_hooks.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace tptrain {

namespace {

TestHooks& hooks_in_force() {
  static TestHooks hooks;
  return hooks;
}

[[noreturn]] void refuse(const std::string& name_value, const std::string& expected) {
  throw std::invalid_argument("--test-hook " + name_value + ": expected " + expected);
}

}  // namespace

const TestHooks& test_hooks() { return hooks_in_force(); }

void set_test_hooks(const TestHooks& hooks) { hooks_in_force() = hooks; }

void parse_test_hook(const std::string& name_value, TestHooks& hooks) {
  const std::size_t eq = name_value.find('=');
  const std::string name = name_value.substr(0, eq);
  const std::string value = eq == std::string::npos ? std::string() : name_value.substr(eq + 1);
  const char* begin = value.c_str();
  char* end = nullptr;
  errno = 0;
  if (name == "kill_in_checkpoint") {
    const long long step = std::strtoll(begin, &end, 10);
    const std::string at = end != begin && *end == '@' ? std::string(end + 1) : std::string("data");
    const bool point = at == "created" || at == "data" || at == "rename";
    if (eq == std::string::npos || end == begin || (*end != '\0' && *end != '@') || errno != 0 || step < 0 || !point)
      refuse(name_value, "kill_in_checkpoint=STEP[@POINT], a checkpoint's step (an integer >= 0) and where: "
                         "created, data or rename");
    hooks.kill_in_checkpoint = step;
    hooks.kill_in_checkpoint_at = at;
  } else if (name == "fail_in_checkpoint") {
    const long long step = std::strtoll(begin, &end, 10);
    if (eq == std::string::npos || end == begin || *end != '\0' || errno != 0 || step < 0)
      refuse(name_value, "fail_in_checkpoint=STEP, a checkpoint's step (an integer >= 0)");
    hooks.fail_in_checkpoint = step;
  } else if (name == "spike_at_step" || name == "nonfinite_from_step") {
    const long long step = std::strtoll(begin, &end, 10);
    if (eq == std::string::npos || end == begin || *end != '\0' || errno != 0 || step < 1)
      refuse(name_value, name + "=STEP, an optimizer step (an integer >= 1)");
    (name == "spike_at_step" ? hooks.spike_at_step : hooks.nonfinite_from_step) = step;
  } else if (name == "slow_rank") {
    const long long rank = std::strtoll(begin, &end, 10);
    const bool colon = end != begin && *end == ':';
    const double t = colon ? std::strtod(end + 1, &end) : 0.0;
    if (eq == std::string::npos || !colon || *end != '\0' || errno != 0 || rank < 0 || rank > 1000000 ||
        !std::isfinite(t) || t <= 0 || t > 60)
      refuse(name_value, "slow_rank=RANK:SECONDS, a world rank and seconds per step from 0 to 60");
    hooks.slow_rank = static_cast<int>(rank);
    hooks.slow_rank_seconds = t;
  } else if (name == "checkpoint_seconds") {
    const double t = std::strtod(begin, &end);
    if (eq == std::string::npos || end == begin || *end != '\0' || !std::isfinite(t) || t < 0 || t > 60)
      refuse(name_value, "checkpoint_seconds=T, seconds per checkpoint write from 0 to 60");
    hooks.checkpoint_seconds = t;
  } else if (name == "layer_seconds") {
    const double t = std::strtod(begin, &end);
    if (eq == std::string::npos || end == begin || *end != '\0' || !std::isfinite(t) || t < 0 || t > 60)
      refuse(name_value, "layer_seconds=T, seconds per layer from 0 to 60");
    hooks.layer_seconds = t;
  } else {
    refuse(name_value,
           "NAME=VALUE with NAME one of kill_in_checkpoint, fail_in_checkpoint, checkpoint_seconds, layer_seconds, "
           "spike_at_step, nonfinite_from_step, "
           "slow_rank");
  }
}

}  // namespace tptrain
