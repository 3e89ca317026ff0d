// The training run of `tptrain train`, evaluation of `tptrain eval` and sampling of
// `tptrain generate`. Each returns the process exit code (0 ok, 1 failed run / bad input).
#pragma once

#include <string>

#include "io/deck.hpp"
#include "src/parallel/topology.hpp"

namespace tptrain::train {

// 3 (util::kRequeueExitStatus) when a stop signal (util/stop_signal.hpp) ended the run early:
// the ranks agreed on a step, finished it and wrote its checkpoint, and rank 0 left the marker
// <run.dir>/requeue (io/requeue_marker.hpp). A metrics record that cannot be written ends the
// run like a failed checkpoint (parallel::AgreedError).
int run_training(const io::Deck& deck, const parallel::Topology& topo);

int run_eval(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
             const std::string& data, int windows);

struct SampleOptions {
  std::string prompt;
  int tokens = 128;
  double temperature = 1.0;
  int top_k = 0;
  unsigned long long seed = 0;
};
int run_generate(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                 const SampleOptions& options);

}  // namespace tptrain::train
