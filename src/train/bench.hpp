// `tptrain bench`: the training step of a deck on synthetic tokens, timed, with its model FLOP
// rate, the GEMM rate of the same ranks measured in the same process, MFU (their ratio) and,
// with --phases, where the step time goes by phase (util::Phase). No data files, no
// checkpoints, no eval. tokens/s, MFU and HFU come from steps fenced only at their boundaries;
// the phase breakdown needs a fence at every phase boundary, so it is measured in steps of its
// own after them. One more step, untimed, counts the launches (kernels/launch_count.hpp): per
// optimizer step, per layer forward and per layer backward, the collectives apart.
#pragma once

#include <string>

#include "io/deck.hpp"
#include "src/parallel/topology.hpp"

namespace tptrain::train {

// The command line bounds both (src/driver/commands.hpp: 100000 timed steps, 1000 warm-up steps).
struct BenchOptions {
  int steps = 10;   // timed optimizer steps
  int warmup = 2;   // untimed steps first (allocation, first touch, BLAS start-up)
  bool phases = false;  // then `steps` more steps timed phase by phase (fenced at every phase boundary)
  // Attention path (kernels/attention_path.hpp): "default" (that of the execution space),
  // "batched" or "causal_tiles".
  std::string attention = "default";
};

// Collective over the world; rank 0 prints the report and one JSON line ({"bench": ...}).
int run_bench(const io::Deck& deck, const parallel::Topology& topo, const BenchOptions& options);

}  // namespace tptrain::train
