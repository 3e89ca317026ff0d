// `tptrain train`: the training loop around a TrainingRun (training_run.hpp): output
// directories and their lock, resumption from the newest checkpoint, metric lines, evaluations,
// periodic checkpoints and the stop on a signal.
#pragma once

#include "io/deck.hpp"
#include "src/parallel/topology.hpp"

namespace tptrain::driver {

// Runs in the deck's training.precision. Returns the process exit code: 0 when every step ran,
// 1 for a failed run or bad input (reported; a metrics record that cannot be written ends the
// run like a failed checkpoint, parallel::AgreedError), 3 (util::kRequeueExitStatus) when a stop
// signal (util/stop_signal.hpp) ended the run early: the ranks agreed on a step, finished it and
// wrote its checkpoint, and rank 0 left the marker <run.dir>/requeue (io/requeue_marker.hpp).
int run_training(const io::Deck& deck, const parallel::Topology& topo);

}  // namespace tptrain::driver
