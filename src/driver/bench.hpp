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

namespace tptrain::driver {

// The bounds keep a typing slip (--warmup 100000) from occupying the allocation for hours; long
// runs print their progress (bench.cpp).
struct BenchOptions {
  static constexpr int max_steps = 100000;  // timed steps
  static constexpr int max_warmup = 1000;   // untimed steps before them: a few are enough
  int steps = 10;   // timed optimizer steps
  int warmup = 2;   // untimed steps first (allocation, first touch, BLAS start-up)
  bool phases = false;  // then `steps` more steps timed phase by phase (fenced at every phase boundary)
  // Attention core (kernels/attention_path.hpp): "default" (the deck's training.attention),
  // "flash", "batched" or "causal_tiles" (the batched core in causal-tile GEMMs).
  std::string attention = "default";
  // --trace FILE.json: one more step, fenced at every phase boundary, written as a Chrome trace
  // (bench_trace.hpp).
  std::string trace;
  // --calibrate OUT.toml: instead of timing steps, measure the machine and write its machine file
  // (calibrate.hpp).
  std::string calibrate;
};

// Collective over the world; rank 0 prints the report and one JSON line ({"bench": ...}).
int run_bench(const io::Deck& deck, const parallel::Topology& topo, const BenchOptions& options);

}  // namespace tptrain::driver
