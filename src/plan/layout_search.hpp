// `tptrain plan --search` (docs/planning.md, "Searching for the fastest layout"): the layouts of
// a GPU count that fit the machine's memory, ranked by their simulated step time
// (step_simulation.hpp). What varies: tensor (a divisor of the node's devices), context (as the
// nearest-fitting search: a divisor of the GPUs cutting the sequence into 2·context chunks, where
// ring attention is allowed), pipeline (a divisor of the layers), virtual stages (a divisor of the
// layers per stage, the micro-batches a multiple of the pipeline), data (the rest), expert (a
// divisor of data and of the experts), micro_batch (1, 2, 4, 8 and the deck's), sequence
// parallelism, the recomputation, the rank order and, wherever data x context > 1, the shard
// mode (the optimizer state alone, the gradients too, the weights too: ZeRO-1, 2, 3; in the
// simulation the distributed optimizer costs nothing against an all-reduce: a reduce-scatter and
// an all-gather move what it does). The precision is the deck's.
//
// The search is pruned, not cut: the layouts that fit the memory (checked first, the cheapest)
// are simulated in the order of their compute-only bound (compute_lower_bound) until that bound
// is slower than the count-th fastest step found, which gives the ranking simulating them all
// would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/plan/machine.hpp"
#include "src/plan/plan.hpp"
#include "src/plan/plan_config.hpp"
#include "src/plan/step_simulation.hpp"

namespace tptrain::plan {

struct RankedLayout {
  Config config;
  std::vector<std::string> sets;  // --set arguments from the deck to it
  std::int64_t bytes = 0;         // the most loaded rank's memory
  StepSimulation simulation;
};

struct SearchResult {
  std::vector<RankedLayout> best;  // fastest first
  std::size_t fitting = 0;         // layouts that fit
  std::size_t simulated = 0;       // of them simulated (not those bounded out)
};

SearchResult search_layouts(const Config& deck, const Machine& m, std::int64_t gpus, std::size_t count);

// The report of `plan --search` for the deck planned as `deck`: the deck's own simulated step,
// then the best layouts, each with its breakdown, its --set arguments and its deck lines.
std::string search_report(const SearchResult& found, const Plan& deck);

// The deck lines that make a layout: "[parallel]" and "[training]" keys as TOML.
std::string deck_lines(const Config& c);

}  // namespace tptrain::plan
