// `tptrain eval`: the mean loss of a checkpoint on held-out data.
#pragma once

#include <string>

#include "io/deck.hpp"
#include "src/parallel/topology.hpp"

namespace tptrain::driver {

// The mean loss per token over the first `windows` windows (<= 0: training.eval_windows) of
// `data` ("": the deck's data.valid), with the model in the deck's training.precision (any
// precision evaluates any checkpoint: checkpoints hold fp32 master weights). Prints it in nats
// per token and in bits per byte (total nats / (ln 2 x the UTF-8 bytes the target tokens decode
// to in the deck's data.tokenizer; nats / ln 2 for byte tokens)), also as one JSON line; returns
// the process exit code (0, or 1 for bad input or a non-finite loss).
int run_eval(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
             const std::string& data, int windows);

// `eval --tasks`: multiple-choice accuracy (src/driver/multiple_choice.hpp) instead of the loss.
struct TaskOptions {
  std::string tasks;   // the task file (JSON Lines)
  std::string scores;  // "" or where rank 0 writes each example's scores (--tasks-scores)
};
// Prints mc_accuracy, mc_accuracy_norm and the counts, also as one JSON line; 0, or 1 for a bad file.
int run_eval_tasks(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                   const TaskOptions& tasks);

}  // namespace tptrain::driver
