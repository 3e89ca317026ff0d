// `tptrain generate`: text sampled from a checkpoint, one byte-level token at a time.
#pragma once

#include <string>

#include "io/deck.hpp"
#include "src/parallel/topology.hpp"

namespace tptrain::train {

struct SampleOptions {
  std::string prompt;
  int tokens = 128;
  double temperature = 1.0;
  int top_k = 0;
  unsigned long long seed = 0;
};

// Streams the prompt and `options.tokens` sampled tokens to stdout (rank 0), with the model in
// the deck's training.precision. Returns the process exit code (0, or 1 for bad input).
int run_generate(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                 const SampleOptions& options);

}  // namespace tptrain::train
