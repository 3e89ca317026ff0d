// Context parallelism (parallel.context; src/model/ring_attention.hpp): every layout that splits
// the sequence over 2 or 4 ranks reproduces the one-rank loss curve — alone, with tensor and
// sequence parallelism, with pipeline stages (also interleaved), with data parallelism and the
// distributed optimizer over data x context, with Llama's grouped-query attention and rotary
// positions, full recompute, bf16 and fp16 — and its checkpoints load under other context sizes
// bit for bit.
#include <cmath>
#include <string>
#include <vector>

#include "catch.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "tests/train/train_test_util.hpp"

namespace tptrain {
namespace {

struct ContextLayout {
  const char* name;
  int tensor, context, pipeline, data;
  std::string sets;  // further deck lines, TOML, per section
};

// The small deck (tests/train/train_test_util.hpp) with 4 layers and a layout.
io::Deck context_deck(const ContextLayout& l, int steps, bool llama = false) {
  io::Deck deck = test::pipeline_deck(l.tensor, l.pipeline, l.data, steps);
  deck.parallel.context = l.context;
  if (llama) {
    deck.model.architecture = "llama";
    deck.model.take_preset_defaults();
    deck.model.kv_heads = 2;
  }
  return deck;
}

void check_curve(const std::vector<double>& curve, const std::vector<double>& reference, double tol) {
  for (std::size_t s = 0; s < curve.size(); ++s) {
    INFO("step " << s + 1 << ": " << curve[s] << " against one rank's " << reference[s]);
    CHECK(std::fabs(curve[s] - reference[s]) <= tol * reference[s]);
  }
}

TEST_CASE("context parallelism: every layout reproduces the one-rank loss curve", "[train][context][mpi]") {
  const int n = test::world_size();
  if (n < 2) return;
  const int steps = 10;
  std::vector<ContextLayout> layouts = {{"context alone", 1, n, 1, 1, ""}};
  if (n == 4) {
    layouts.push_back({"context 2 x tensor 2, sequence parallel", 2, 2, 1, 1, "sp"});
    layouts.push_back({"context 2 x pipeline 2", 1, 2, 2, 1, ""});
    layouts.push_back({"context 2 x pipeline 2, interleaved", 1, 2, 2, 1, "interleaved"});
    layouts.push_back({"context 2 x data 2, distributed optimizer", 1, 2, 1, 2, "zero"});
    layouts.push_back({"context 4, recompute = full", 1, 4, 1, 1, "full"});
  } else {
    layouts.push_back({"context 2, distributed optimizer", 1, 2, 1, 1, "zero"});
    layouts.push_back({"context 2, recompute = full", 1, 2, 1, 1, "full"});
  }
  for (const bool llama : {false, true}) {
    const auto reference = test::loss_curve(context_deck({"one rank", 1, 1, 1, 1, ""}, steps, llama), MPI_COMM_SELF, steps);
    for (const ContextLayout& l : layouts) {
      INFO(l.name << (llama ? ", llama (grouped-query attention, rotary)" : ", gpt2"));
      io::Deck deck = context_deck(l, steps, llama);
      if (l.sets == "sp") deck.parallel.sequence_parallel = true;
      if (l.sets == "zero") deck.optimizer.distributed = true;
      if (l.sets == "full") deck.training.recompute = "full";
      if (l.sets == "interleaved") deck.parallel.virtual_stages = 2;
      check_curve(test::loss_curve(deck, MPI_COMM_WORLD, steps), reference, 1e-5);
    }
  }
}

TEST_CASE("context parallelism: bf16 and fp16 follow the one-rank curves", "[train][context][mixed][mpi]") {
  const int n = test::world_size();
  if (n < 2) return;
  const int steps = 10;
  for (const std::string precision : {"bf16", "fp16"}) {
    INFO(precision);
    const test::FloatingPointTrapsOff overflow;  // fp16's first steps overflow at the initial loss scale
    io::Deck one = context_deck({"one rank", 1, 1, 1, 1, ""}, steps, true);
    io::Deck split = context_deck({"context", 1, n, 1, 1, ""}, steps, true);
    one.training.precision = split.training.precision = precision;
    const auto curve_of = [&](const io::Deck& d, MPI_Comm comm) {
      return precision == "bf16" ? test::loss_curve<kx::bf16>(d, comm, steps) : test::loss_curve<kx::fp16>(d, comm, steps);
    };
    // The ring merges O in fp32 and rounds it once, as the one-rank core does; what differs is the
    // order of the fp32 sums (the merge), which moves a 16-bit rounding now and then.
    check_curve(curve_of(split, MPI_COMM_WORLD), curve_of(one, MPI_COMM_SELF), 2e-3);
  }
}

// The logical weights and AdamW moments of a run, in parameter order, on every rank.
std::vector<std::vector<double>> logical_state(model::GptModel<float>& m, parallel::Communicator& tp) {
  std::vector<std::vector<double>> out;
  for (auto* p : m.parameters()) {
    out.push_back(test::logical(*p, false, tp));
    out.push_back(test::logical_of(*p, p->exp_avg, tp));
    out.push_back(test::logical_of(*p, p->exp_avg_sq, tp));
  }
  return out;
}

TEST_CASE("context parallelism: a checkpoint loads under other context sizes bit for bit", "[train][context][checkpoint][mpi]") {
  const int n = test::world_size();
  if (n < 2) return;
  test::SharedTempDir dir;
  const std::string section = "[checkpoint]\ndir = \"" + dir.path() + "\"\n";
  const auto deck_of = [&](int context, int data) {
    io::Deck d = test::small_deck(1, data, 3, section);
    d.parallel.context = context;
    return d;
  };
  const io::Deck saving = deck_of(2, n / 2);
  parallel::Topology topo(MPI_COMM_WORLD, parallel::layout_of(saving));
  train::TrainingRun<float> run(saving, topo);
  for (int s = 0; s < 3; ++s) run.step(s);
  checkpoint::save_checkpoint(run.model(), saving, topo, 3, 0);
  const auto saved = logical_state(run.model(), topo.tp());
  const double saved_eval = run.evaluate();
  const std::string file = checkpoint::checkpoint_path(dir.path(), 3);
  for (const int context : {1, n}) {
    INFO("saved at context 2, loaded at context " << context);
    const io::Deck loading = deck_of(context, n / context);
    parallel::Topology topo2(MPI_COMM_WORLD, parallel::layout_of(loading));
    train::TrainingRun<float> run2(loading, topo2);
    checkpoint::load_weights(run2.model(), topo2, file, true);
    CHECK(logical_state(run2.model(), topo2.tp()) == saved);  // bitwise
    CHECK(std::fabs(run2.evaluate() - saved_eval) <= 1e-5 * saved_eval);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace tptrain
