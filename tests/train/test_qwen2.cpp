// Qwen2 (Qwen2ForCausalLM): the llama block with biases on q, k and v, added as a preset of the
// block specification alone (src/model/spec/block_spec.hpp). Its one layer the other presets lack, the
// column-parallel attn/qkv/bias under grouped-query attention, against the one-rank run on every
// layout of the world, with sequence parallelism (the bias gradient of a column-parallel layer
// is local to each rank's heads, never summed over the sequence).
#include <cmath>
#include <mpi.h>

#include "catch.hpp"
#include "src/train/training_run.hpp"
#include "tests/model/model_test_util.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;
using test::Gradients;
using test::check_close;
using test::gradients_of;

namespace {

struct Layout {
  int tensor, pipeline, data;
};

// The small pipeline deck as a qwen2 model (8 query heads, 4 key/value heads, d = 4).
io::Deck qwen2_deck(int tensor, int pipeline, int data, int steps) {
  io::Deck deck = test::pipeline_deck(tensor, pipeline, data, steps, 8);
  deck.model.architecture = "qwen2";
  deck.model.take_preset_defaults();  // a deck built in code: the preset's choices, as the parser sets them
  deck.model.heads = 8;
  deck.model.kv_heads = 4;
  deck.model.rope_theta = 1000000.0;
  deck.model.norm_eps = 1e-6;
  return deck;
}

void check_against(const Gradients& ref, const io::Deck& deck, int step, double tol) {
  const Gradients got = gradients_of<float>(deck, MPI_COMM_WORLD, step);
  INFO("step " << step << ": loss " << got.loss << " vs " << ref.loss << ", norm " << got.norm << " vs " << ref.norm);
  CHECK(std::fabs(got.loss - ref.loss) <= 1e-5 * std::fabs(ref.loss));
  CHECK(std::fabs(got.norm - ref.norm) <= tol * ref.norm);
  check_close(got.grads, ref.grads, tol);
}

}  // namespace

TEST_CASE("qwen2: llama's parameters and the q/k/v bias, nothing else", "[qwen2][model]") {
  const io::Deck deck = qwen2_deck(1, 1, 1, 2);
  parallel::Topology self(MPI_COMM_SELF, parallel::Layout{});
  train::TrainingRun run(deck, self);
  std::vector<std::string> names;
  for (auto* p : run.model().parameters()) names.push_back(p->name);
  const std::vector<std::string> first{"embedding/word",       "layers/0/ln_1/weight",      "layers/0/attn/qkv/weight",
                                       "layers/0/attn/qkv/bias", "layers/0/attn/proj/weight", "layers/0/ln_2/weight",
                                       "layers/0/mlp/fc/weight", "layers/0/mlp/proj/weight"};
  REQUIRE(names.size() == 1 + 7 * 4 + 2);
  CHECK(std::vector<std::string>(names.begin(), names.begin() + 8) == first);
  CHECK(names.back() == "lm_head/weight");
  CHECK(run.model().parameters()[3]->shape == std::vector<std::int64_t>{(8 + 2 * 4) * 4});  // [Q | K | V] biases
}

TEST_CASE("qwen2: every layout gives the one-rank loss, gradients and gradient norm", "[qwen2][layouts][mpi]") {
  const Gradients ref[2] = {gradients_of(qwen2_deck(1, 1, 1, 4), MPI_COMM_SELF, 0),
                            gradients_of(qwen2_deck(1, 1, 1, 4), MPI_COMM_SELF, 2)};
  // The bias moves: its gradient is not zero (a bias the model ignored would pass the rest).
  double bias_norm = 0;
  for (const auto& [name, g] : ref[0].grads)
    if (name.find("attn/qkv/bias") != std::string::npos)
      for (const double v : g) bias_norm += v * v;
  CHECK(bias_norm > 0);
  const int n = test::world_size();
  std::vector<Layout> layouts{{n, 1, 1}, {1, n, 1}, {1, 1, n}};
  if (n == 4) layouts.push_back({2, 2, 1});
  for (const Layout& l : layouts) {
    INFO("tensor " << l.tensor << " x pipeline " << l.pipeline << " x data " << l.data);
    check_against(ref[0], qwen2_deck(l.tensor, l.pipeline, l.data, 4), 0, 1e-5);
    check_against(ref[1], qwen2_deck(l.tensor, l.pipeline, l.data, 4), 2, 1e-4);
    if (l.tensor > 1) {
      io::Deck sp = qwen2_deck(l.tensor, l.pipeline, l.data, 4);
      sp.parallel.sequence_parallel = true;
      INFO("sequence parallel");
      check_against(ref[0], sp, 0, 1e-5);
    }
  }
}
