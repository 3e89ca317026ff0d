// The environment variables that once changed tptrain's behaviour and now are deck keys or test
// hooks (docs/design.md, "Test hooks"). Nothing reads them any more; a job script that still
// sets one would otherwise get the default without a word.
#pragma once

namespace tptrain::driver {

// A warning on stderr for each retired variable set in the environment, naming what replaces it.
// Called once at start-up, by one rank.
void warn_of_retired_environment();

}  // namespace tptrain::driver
