#include "src/driver/retired_environment.hpp"

#include <cstdlib>

#include "src/util/log.hpp"

namespace tptrain::driver {

void warn_of_retired_environment() {
  struct Retired {
    const char* variable;
    const char* instead;
  };
  static const Retired retired[] = {
      {"TPTRAIN_NCCL_PIPELINE_LANES", "the deck key parallel.nccl_pipeline_lanes (true or false)"},
      {"TPTRAIN_MPI_DEVICE_MEMORY", "the deck key parallel.mpi_device_memory (\"auto\", \"on\" or \"off\")"},
      {"TPTRAIN_METADATA_TIMEOUT_S", "the deck key checkpoint.metadata_timeout_s (seconds)"},
      {"TPTRAIN_TEST_KILL_IN_CHECKPOINT", "the option --test-hook kill_in_checkpoint=STEP"},
      {"TPTRAIN_TEST_LAYER_SECONDS", "the option --test-hook layer_seconds=T"},
  };
  for (const Retired& r : retired)
    if (std::getenv(r.variable) != nullptr)
      log::warning(fmt::format("{} is set but no longer read: use {} instead", r.variable, r.instead));
}

}  // namespace tptrain::driver
