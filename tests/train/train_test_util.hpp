// A small training deck on the test corpus, and a loss curve driven through TrainingRun.
#pragma once

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <mpi.h>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "catch.hpp"
#include "src/parallel/topology_of_deck.hpp"
#include "src/train/training_run.hpp"
#include "tests/model/model_test_util.hpp"
#include "tests/mpi_test_util.hpp"
#include "tests/test_helpers.hpp"
#include "tests/train/per_parameter_optimizer.hpp"

namespace tptrain::test {

// The tied copies of the word embedding, one on each rank of the embedding group (the first and
// the last pipeline stage), are bit-identical: their element-wise minimum and maximum over the
// group agree. Call on the embedding group's ranks.
template <class Model>
bool tied_embedding_copies_identical(Model& model, parallel::Topology& topo) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.word()->value);
  std::vector<float> lo(h.data(), h.data() + h.size()), hi = lo;
  MPI_Allreduce(MPI_IN_PLACE, lo.data(), static_cast<int>(lo.size()), MPI_FLOAT, MPI_MIN, topo.embedding().mpi_comm());
  MPI_Allreduce(MPI_IN_PLACE, hi.data(), static_cast<int>(hi.size()), MPI_FLOAT, MPI_MAX, topo.embedding().mpi_comm());
  return lo == hi;
}

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
valid = "corpus_valid.txt"
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
  parallel::Topology topo(comm, parallel::layout_of(deck));
  train::TrainingRun<T> run(deck, topo);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(run.step(s).loss);
  return losses;
}

// Layout comparisons (tests/train/test_pipeline.cpp, test_memory_at_scale.cpp).
inline parallel::Layout layout_of(const io::Deck& deck) { return parallel::layout_of(deck); }

using Named = std::map<std::string, std::vector<double>>;

// Logical gradients (or values) of every parameter this rank holds, by name.
template <class T>
Named logical_by_name(model::GptModel<T>& m, parallel::Communicator& tp, bool gradient) {
  Named out;
  for (auto* p : m.parameters()) out[p->name] = test::logical(*p, gradient, tp);
  return out;
}

// max |a - b| <= tol * max |b|, per tensor.
inline void check_close(const Named& got, const Named& want, double tol) {
  for (const auto& [name, g] : got) {
    const auto it = want.find(name);
    REQUIRE(it != want.end());
    const auto& r = it->second;
    REQUIRE(g.size() == r.size());
    double scale = 0.0, diff = 0.0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      scale = std::max(scale, std::fabs(r[i]));
      diff = std::max(diff, std::fabs(g[i] - r[i]));
    }
    INFO(name << ": max |diff| " << diff << ", max |reference| " << scale);
    CHECK(diff <= tol * scale + 1e-12);
  }
}

// Gradients, loss and gradient norm of step `step` (after `step` optimizer steps) of a deck on
// a layout of `comm`.
struct Gradients {
  double loss = 0, norm = 0;
  Named grads;
};

template <class T = float>
Gradients gradients_of(const io::Deck& deck, MPI_Comm comm, int step,
                       schedule::Schedule schedule = schedule::Schedule::one_f_one_b) {
  parallel::Topology topo(comm, layout_of(deck));
  train::TrainingRun<T> run(deck, topo, train::RunOptions{schedule, true});
  for (int s = 0; s < step; ++s) run.step(s);
  Gradients g;
  g.loss = run.compute_gradients(step);
  g.norm = test::global_grad_norm(kx::ExecSpace(), run.model().unique_parameters(), topo.tp(), topo.pp());
  g.grads = logical_by_name(run.model(), topo.tp(), true);
  return g;
}

}  // namespace tptrain::test
