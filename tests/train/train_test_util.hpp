// A small training deck on the test corpus, and a loss curve driven through TrainingRun.
#pragma once

#include <algorithm>
#include <fmt/format.h>
#include <mpi.h>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "src/train/training_run.hpp"
#include "tests/mpi_test_util.hpp"

namespace tptrain::test {

// Layout (tensor, 1, data); `extra` is appended to the deck text (e.g. a [checkpoint] section).
inline io::Deck small_deck(int tensor, int data, int steps, const std::string& extra = "") {
  const std::string text = fmt::format(R"(
[model]
layers = 2
hidden = 32
heads = 4
ffn_hidden = 64
seq_length = 16
vocab_size = 256
[parallel]
tensor = {}
data = {}
[training]
global_batch = 8
micro_batch = 2
steps = {}
seed = 99
grad_clip = 1.0
[optimizer]
lr = 1e-2
min_lr = 1e-3
warmup_steps = {}
[data]
train = "corpus.txt"
valid = "corpus.txt"
{}
)", tensor, data, steps, std::min(2, steps), extra);
  return io::parse_deck(text, "small.toml", std::string(TPTRAIN_SOURCE_DIR) + "/tests/data/cli");
}

// The small deck with 4 layers (so that 1, 2 and 4 pipeline stages divide them), layout
// (tensor, pipeline, data) and `global_batch` sequences of 2 per step.
inline io::Deck pipeline_deck(int tensor, int pipeline, int data, int steps, int global_batch = 8,
                              const std::string& extra = "") {
  io::Deck deck = small_deck(tensor, data, steps, extra);
  deck.model.layers = 4;
  deck.parallel.pipeline = pipeline;
  deck.training.global_batch = global_batch;
  return deck;
}

// T: the run's precision (float, kx::bf16, kx::fp16).
template <class T = float>
std::vector<double> loss_curve(const io::Deck& deck, MPI_Comm comm, int steps) {
  parallel::Topology topo(comm, parallel::Layout{deck.parallel.tensor, deck.parallel.pipeline, deck.parallel.data});
  train::TrainingRun<T> run(deck, topo);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(run.step(s).loss);
  return losses;
}

}  // namespace tptrain::test
