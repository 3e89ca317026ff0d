// The mixture of experts under every kind of parallelism (model.mlp = "moe";
// src/model/mixture_of_experts.hpp): expert parallelism over 2 and 4 ranks, with tensor and
// sequence parallelism, with pipeline stages, with the distributed optimizer, with full recompute
// and a capacity factor reproduces the one-rank loss curve within 1e-5 over 10 steps, and so does
// context parallelism (whose ranks sum the load-balancing and z losses' statistics); bf16 and fp16
// follow their one-rank curves; the routing metrics count every copy, and a capacity factor too
// large for an integer is dropless; and a checkpoint written under one expert layout loads under
// others. DeepSeek-V3's blocks (multi-head latent attention and DeepSeekMoE) reproduce one rank in
// the same layouts (tensor 2 with sequence parallelism, pipeline 2, context 2, expert 2) and in
// bf16.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "catch.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "tests/train/train_test_util.hpp"

namespace tptrain {
namespace {

struct ExpertLayout {
  const char* name;
  int tensor, pipeline, data, expert;
  std::string sets;  // "sp", "zero", "zero3" (optimizer.shard = "parameters"), "full"
  int context = 1;
};

// The small deck (tests/train/train_test_util.hpp) as a Mixtral: 4 blocks of 4 experts, top 2.
io::Deck moe_deck(const ExpertLayout& l, int steps, double capacity = 0.0) {
  io::Deck deck = test::pipeline_deck(l.tensor, l.pipeline, l.data, steps);
  deck.model.architecture = "mixtral";
  deck.model.take_preset_defaults();
  deck.model.kv_heads = 2;
  deck.model.experts = 4;
  deck.model.experts_per_token = 2;
  deck.model.moe_capacity_factor = capacity;
  deck.parallel.expert = l.expert;
  deck.parallel.context = l.context;
  deck.model.moe_z_loss_coeff = 1e-3;
  if (l.sets == "sp") deck.parallel.sequence_parallel = true;
  if (l.sets == "zero" || l.sets == "zero3") deck.optimizer.distributed = true;
  if (l.sets == "zero3") deck.optimizer.shard = "parameters";
  if (l.sets == "full") deck.training.recompute = "full";
  return deck;
}

void check_curve(const std::vector<double>& curve, const std::vector<double>& reference, double tol) {
  REQUIRE(curve.size() == reference.size());
  for (std::size_t s = 0; s < curve.size(); ++s) {
    INFO("step " << s + 1 << ": " << curve[s] << " against one rank's " << reference[s]);
    CHECK(std::fabs(curve[s] - reference[s]) <= tol * reference[s]);
  }
}

io::Deck deepseek_deck(const ExpertLayout& l, int steps, double rate);

std::vector<ExpertLayout> layouts(int n) {
  if (n == 4)
    return {{"expert 4 (data 4)", 1, 1, 4, 4, ""},
            {"expert 2 of data 4", 1, 1, 4, 2, ""},
            {"expert 2 x tensor 2, sequence parallel", 2, 1, 2, 2, "sp"},
            {"expert 2 x pipeline 2", 1, 2, 2, 2, ""},
            {"expert 2 of data 4, distributed optimizer", 1, 1, 4, 2, "zero"},
            {"expert 4, recompute = full", 1, 1, 4, 4, "full"},
            {"context 2 x expert 2 (data 2)", 1, 1, 2, 2, "", 2},
            {"context 2 x tensor 2, sequence parallel", 2, 1, 1, 1, "sp", 2}};
  return {{"expert 2 (data 2)", 1, 1, 2, 2, ""},
          {"expert 2, distributed optimizer", 1, 1, 2, 2, "zero"},
          {"context 2", 1, 1, 1, 1, "", 2}};
}

TEST_CASE("mixture of experts: every expert layout reproduces the one-rank loss curve", "[train][moe][mpi]") {
  const int n = test::world_size();
  if (n < 2) return;
  const int steps = 10;
  for (const double capacity : {0.0, 1.0}) {
    const auto reference = test::loss_curve(moe_deck({"one rank", 1, 1, 1, 1, ""}, steps, capacity), MPI_COMM_SELF, steps);
    for (const ExpertLayout& l : layouts(n)) {
      // A capacity applies to each rank's tokens: a context rank keeps ceil(c·k·N/E) of its chunks'.
      if (capacity > 0 && l.context > 1) continue;
      INFO(l.name << (capacity > 0 ? ", capacity factor 1" : ", dropless"));
      check_curve(test::loss_curve(moe_deck(l, steps, capacity), MPI_COMM_WORLD, steps), reference, 1e-5);
    }
  }
}

TEST_CASE("mixture of experts: bf16 and fp16 under expert parallelism follow the one-rank curves",
          "[train][moe][mixed][mpi]") {
  const int n = test::world_size();
  if (n < 2) return;
  const int steps = 10;
  for (const std::string precision : {"bf16", "fp16"}) {
    INFO(precision);
    const test::FloatingPointTrapsOff overflow;  // fp16's first steps overflow at the initial loss scale
    // bf16: DeepSeek-V3's blocks (multi-head latent attention, its mixture); fp16: Mixtral's.
    const ExpertLayout single{"one rank", 1, 1, 1, 1, ""}, experts{"expert", 1, 1, n, n, ""};
    io::Deck one = precision == "bf16" ? deepseek_deck(single, steps, 0.01) : moe_deck(single, steps);
    io::Deck split = precision == "bf16" ? deepseek_deck(experts, steps, 0.01) : moe_deck(experts, steps);
    one.training.precision = split.training.precision = precision;
    const auto curve_of = [&](const io::Deck& d, MPI_Comm comm) {
      return precision == "bf16" ? test::loss_curve<kx::bf16>(d, comm, steps) : test::loss_curve<kx::fp16>(d, comm, steps);
    };
    // The fp32 gradient sums run in another order (over the data ranks, per source chunk of an
    // expert): a 16-bit rounding of the weights moves now and then, as under data parallelism alone.
    check_curve(curve_of(split, MPI_COMM_WORLD), curve_of(one, MPI_COMM_SELF), 2e-3);
  }
}

TEST_CASE("mixture of experts: the routing metrics count every copy once", "[train][moe][mpi]") {
  const int n = test::world_size();
  // Dropless, and capacities at or beyond the copies a rank routes, whose ceil(c·k·N/E) does not
  // fit an integer: dropless too (they once dropped every copy).
  for (const double capacity : {0.0, 1e18, 1e300}) {
    INFO("capacity factor " << capacity);
    io::Deck deck = moe_deck({"expert", 1, 1, n, n, ""}, 2, capacity);
    parallel::Topology topo(MPI_COMM_WORLD, parallel::layout_of(deck));
    train::TrainingRun<float> run(deck, topo);
    run.step(0);
    const std::vector<model::SublayerMetrics> metrics = run.take_sublayer_metrics();
    REQUIRE(metrics.size() == 1);
    const auto field = [&](const std::string& key) {
      for (const model::MetricField& f : metrics[0].fields)
        if (f.key == key) return f.values;
      FAIL("no metric " << key);
      return std::vector<double>{};
    };
    // Dropless: every token of the step reaches k experts in every block.
    double copies = 0;
    for (const double c : field("moe_tokens_per_expert")) copies += c;
    const std::int64_t tokens = std::int64_t(deck.training.global_batch) * deck.model.seq_length;
    CHECK(copies == double(tokens * deck.model.experts_per_token * deck.model.layers));
    CHECK(field("moe_dropped").at(0) == 0);
    CHECK(field("moe_load_max_over_mean").at(0) >= 1.0);
    // E · Σ f_e P_e with Σ f_e = k: k when the router is uniform, more when it is not.
    const double aux = field("moe_aux_loss").at(0);
    CHECK(aux >= 0.5 * deck.model.experts_per_token);
    CHECK(aux < deck.model.experts);
  }
}

// DeepSeek-V3 (model.architecture = "deepseek_v3"): multi-head latent attention (4 heads of 6 + 4
// query/key features and 6 value features, latents of 12 and 10, YaRN with its softmax factor),
// one multi-token prediction module (without context parallelism, which it does not run under),
// and its mixture: its router (sigmoid scores, 2 groups of 2 experts of which 1 competes, scaled
// by 2.5) with auxiliary-loss-free balancing at `rate` and the sequence-wise balance loss,
// fine-grained experts (32 wide where the dense MLP is 64), a shared expert, and a dense first
// block.
io::Deck deepseek_deck(const ExpertLayout& l, int steps, double rate) {
  io::Deck deck = moe_deck(l, steps);
  deck.model.architecture = "deepseek_v3";
  deck.model.take_preset_defaults();
  deck.model.kv_heads = 0;
  deck.model.q_lora_rank = 12;
  deck.model.kv_lora_rank = 10;
  deck.model.qk_nope_head_dim = 6;
  deck.model.qk_rope_head_dim = 4;
  deck.model.v_head_dim = 6;
  deck.model.position = "yarn";
  deck.model.rope_factor = 4;
  deck.model.rope_original_max_positions = 8;
  deck.model.rope_mscale = 1;
  deck.model.rope_mscale_all_dim = 1;
  deck.model.mtp_depth = l.context == 1 ? 1 : 0;  // multi-token prediction runs without context parallelism
  deck.model.mtp_loss_coeff = 0.3;
  deck.model.moe_ffn_hidden = 32;
  deck.model.moe_shared_experts = 1;
  deck.model.moe_dense_layers = 1;
  deck.model.moe_aux_loss_per_sequence = true;
  deck.model.moe_score_function = "sigmoid";
  deck.model.moe_groups = 2;
  deck.model.moe_groups_per_token = 1;
  deck.model.moe_routed_scaling = 2.5;
  deck.model.moe_z_loss_coeff = 0.0;  // a softmax's
  deck.model.moe_bias_update_rate = rate;
  return deck;
}

// Skews a DeepSeek router: expert bias `bias` on experts 0 and 1, 0 on the others (in fp32 the
// value is the master), and every rank's router told.
void bias_first_two_experts(train::TrainingRun<float>& run, const parallel::Topology& topo, float bias) {
  for (model::Parameter<float>* p : run.model().parameters())
    if (p->name.find("router/expert_bias") != std::string::npos) {
      auto h = Kokkos::create_mirror_view(p->value);
      for (std::size_t e = 0; e < h.extent(0); ++e) h(e) = e < 2 ? bias : 0.0f;
      Kokkos::deep_copy(p->value, h);
    }
  run.model().expert_biases_from_master(kx::ExecSpace(), topo.dp_cp());
}

// The values of every router's expert bias parameter this rank holds, block after block.
template <class T>
std::vector<double> expert_bias_values(model::GptModel<T>& m) {
  std::vector<double> out;
  for (model::Parameter<T>* p : m.parameters())
    if (p->name.find("router/expert_bias") != std::string::npos) {
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p->value);
      for (std::size_t i = 0; i < h.extent(0); ++i) out.push_back(double(h(i)));
    }
  return out;
}

// The balancing's loads are the step's over every rank, so each layout's bias, hence its curve,
// is one rank's; the bias is the same on every rank, moved, and a checkpoint restores it.
TEST_CASE("mixture of experts: DeepSeek-V3's routing with balancing reproduces one rank in every layout",
          "[train][moe][mpi]") {
  const int n = test::world_size();
  if (n < 2) return;
  const int steps = 10;
  const auto reference = test::loss_curve(deepseek_deck({"one rank", 1, 1, 1, 1, ""}, steps, 0.01), MPI_COMM_SELF,
                                          steps);
  // Without balancing the curve differs: the bias moves the routing.
  const auto frozen = test::loss_curve(deepseek_deck({"one rank", 1, 1, 1, 1, ""}, steps, 0.0), MPI_COMM_SELF, steps);
  CHECK(std::fabs(frozen.back() - reference.back()) > 1e-4 * reference.back());
  // Context parallelism runs without multi-token prediction: its own one-rank curve.
  io::Deck one_without_mtp = deepseek_deck({"one rank", 1, 1, 1, 1, ""}, steps, 0.01);
  one_without_mtp.model.mtp_depth = 0;
  const auto without_mtp = test::loss_curve(one_without_mtp, MPI_COMM_SELF, steps);
  CHECK(std::fabs(without_mtp.back() - reference.back()) > 1e-4 * reference.back());  // the modules train it
  // Sharded parameters: the modules' weights gathered with the head's, the balanced bias written
  // into the shards.
  std::vector<ExpertLayout> all = layouts(n);
  if (n == 2) all.push_back({"expert 2, sharded parameters", 1, 1, 2, 2, "zero3"});
  if (n == 4) all.push_back({"expert 2 x pipeline 2, sharded parameters", 1, 2, 2, 2, "zero3"});
  for (const ExpertLayout& l : all) {
    // 4 ranks: tensor, pipeline (the dense block on the first stage, the modules on the last),
    // sharded and context.
    if (n == 4 && l.sets != "zero" && l.sets != "sp" && l.pipeline == 1 && l.context == 1) continue;
    INFO(l.name);
    check_curve(test::loss_curve(deepseek_deck(l, steps, 0.01), MPI_COMM_WORLD, steps),
                l.context > 1 ? without_mtp : reference, 1e-5);
  }
}

// A sigmoid router skewed by its bias towards experts 0 and 1 (every token's top 2 at first), no
// load-balancing loss: with balancing the loads even out over the steps, without it they stay.
TEST_CASE("mixture of experts: auxiliary-loss-free balancing evens out a skewed router's loads", "[train][moe]") {
  const auto load_curve = [](double rate) {
    io::Deck deck = deepseek_deck({"one rank", 1, 1, 1, 1, ""}, 30, rate);
    deck.model.moe_groups = 1;
    deck.model.moe_aux_loss_coeff = 0.0;
    parallel::Topology topo(MPI_COMM_SELF, parallel::layout_of(deck));
    train::TrainingRun<float> run(deck, topo);
    bias_first_two_experts(run, topo, 0.3f);
    std::vector<double> max_over_mean;
    for (int s = 0; s < deck.training.steps; ++s) {
      run.step(s);
      const std::vector<model::SublayerMetrics> metrics = run.take_sublayer_metrics();
      for (const model::MetricField& f : metrics.at(0).fields)
        if (f.key == "moe_load_max_over_mean") max_over_mean.push_back(f.values.at(0));
    }
    return max_over_mean;
  };
  const std::vector<double> balanced = load_curve(0.01), skewed = load_curve(0.0);
  // The last 10 steps' mean: a sign update overshoots by a step's rate, so the load oscillates.
  const auto settled = [](const std::vector<double>& c) {
    double sum = 0;
    for (std::size_t s = c.size() - 10; s < c.size(); ++s) sum += c[s] / 10;
    return sum;
  };
  INFO("load max/mean with balancing: first " << balanced.front() << ", last 10 steps " << settled(balanced)
                                              << "; without: " << settled(skewed));
  CHECK(balanced.front() > 1.9);  // k = 2 of 4 experts, all on experts 0 and 1
  CHECK(settled(skewed) > 1.9);
  CHECK(settled(balanced) < 1.3);
}

TEST_CASE("mixture of experts: the routing imbalance is the busiest expert rank's rows over the mean",
          "[train][moe][mpi]") {
  // `tptrain bench`'s expert_imbalance (GptModel::take_expert_imbalance). A router biased so that
  // every copy goes to experts 0 and 1 (k = 2 of 4): on 2 ranks (2 experts each) rank 0 receives
  // every row, twice the mean; on 4 ranks (1 each) ranks 0 and 1 half each, again twice the mean.
  const int n = test::world_size();
  if (n < 2) return;
  io::Deck deck = deepseek_deck({"expert", 1, 1, n, n, ""}, 2, 0.0);
  deck.model.moe_groups = 1;
  deck.model.moe_aux_loss_coeff = 0.0;
  parallel::Topology topo(MPI_COMM_WORLD, parallel::layout_of(deck));
  train::TrainingRun<float> run(deck, topo);
  bias_first_two_experts(run, topo, 100.0f);
  run.model().keep_expert_rows(true);
  run.step(0);
  CHECK(run.model().take_expert_imbalance(topo.ep()) == Approx(2.0).epsilon(1e-12));
  // Taken: nothing left until the next counted forward; off: nothing counted.
  CHECK(run.model().take_expert_imbalance(topo.ep()) == 1.0);
  run.model().keep_expert_rows(false);
  run.step(1);
  CHECK(run.model().take_expert_imbalance(topo.ep()) == 1.0);
}

TEST_CASE("mixture of experts: the balanced bias is the same on every rank and a checkpoint restores it",
          "[train][moe][checkpoint][mpi]") {
  const int n = test::world_size();
  const auto check = [&](auto precision_tag, const char* precision) {
    using T = decltype(precision_tag);
    INFO(precision << ", data " << n << ", distributed optimizer");
    test::SharedTempDir dir;
    io::Deck deck = deepseek_deck({"zero", 1, 1, n, 1, "zero"}, 4, 0.01);
    deck.training.precision = precision;
    deck.checkpoint.dir = dir.path();
    parallel::Topology topo(MPI_COMM_WORLD, parallel::layout_of(deck));
    train::TrainingRun<T> run(deck, topo);
    for (int s = 0; s < 3; ++s) run.step(s);
    // The fp32 biases the routers choose with, and their parameter (rounded to T) alike.
    const std::vector<double> bias = run.model().expert_biases();
    // The mixture blocks' and the multi-token prediction module's.
    REQUIRE(bias.size() ==
            std::size_t((deck.model.layers - deck.model.moe_dense_layers + deck.model.mtp_depth) * deck.model.experts));
    const std::vector<double> values = expert_bias_values(run.model());
    REQUIRE(values.size() == bias.size());
    for (std::size_t i = 0; i < bias.size(); ++i) CHECK(values[i] == double(T(float(bias[i]))));
    double moved = 0;
    for (const double b : bias) moved = std::max(moved, std::fabs(b));
    CHECK(moved > 0.005);  // three steps of ±0.01 moved it
    std::vector<double> low = bias, high = bias;
    MPI_Allreduce(MPI_IN_PLACE, low.data(), int(low.size()), MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, high.data(), int(high.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    CHECK(low == bias);
    CHECK(high == bias);
    checkpoint::save_checkpoint(run.model(), deck, topo, 3, 0);
    const double next_loss = run.step(3).loss;
    train::TrainingRun<T> resumed(deck, topo);
    checkpoint::load_weights(resumed.model(), topo, checkpoint::checkpoint_path(dir.path(), 3), true);
    CHECK(resumed.model().expert_biases() == bias);  // fp32, from the masters (sharded: all-reduced)
    CHECK(resumed.step(3).loss == next_loss);  // the routers choose with the restored fp32 bias
    MPI_Barrier(MPI_COMM_WORLD);
  };
  check(float{}, "fp32");
  check(kx::bf16{}, "bf16");
}

TEST_CASE("mixture of experts: a checkpoint loads under other expert layouts", "[train][moe][checkpoint][mpi]") {
  const int n = test::world_size();
  if (n < 2) return;
  test::SharedTempDir dir;
  const auto deck_of = [&](int expert) {
    io::Deck d = moe_deck({"expert", 1, 1, n, expert, ""}, 3);
    d.checkpoint.dir = dir.path();
    return d;
  };
  const io::Deck saving = deck_of(2);
  parallel::Topology topo(MPI_COMM_WORLD, parallel::layout_of(saving));
  train::TrainingRun<float> run(saving, topo);
  for (int s = 0; s < 3; ++s) run.step(s);
  checkpoint::save_checkpoint(run.model(), saving, topo, 3, 0);
  const double saved_eval = run.evaluate();
  const double next_loss = run.step(3).loss;
  const std::string file = checkpoint::checkpoint_path(dir.path(), 3);
  for (const int expert : {1, n}) {
    INFO("saved under parallel.expert = 2, loaded under " << expert);
    const io::Deck loading = deck_of(expert);
    parallel::Topology topo2(MPI_COMM_WORLD, parallel::layout_of(loading));
    train::TrainingRun<float> run2(loading, topo2);
    checkpoint::load_weights(run2.model(), topo2, file, true);
    CHECK(std::fabs(run2.evaluate() - saved_eval) <= 1e-6 * saved_eval);
    // and the runs go on alike: one more step from the loaded state
    CHECK(std::fabs(run2.step(3).loss - next_loss) <= 1e-5 * next_loss);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace tptrain
