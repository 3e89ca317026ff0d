// `tptrain plan` with a mixture of experts (model.mlp = "moe", parallel.expert; docs/planning.md,
// "Mixture of experts"): Mixtral-8x7B's published parameter count exactly and its active count by
// formula; FLOPs of K of the E experts and the router against a hand formula; a rank's share of the
// experts, their gradients and their optimizer state under expert parallelism; the MoE buffers
// against their formulas; the all-to-all bytes per step and their part across nodes against the
// rank map's groups one by one; the layout search's parallel.expert; the shipped deck.
#include "catch.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "src/model/model_flops.hpp"
#include "src/parallel/topology_rank_map.hpp"
#include "src/plan/activation_memory.hpp"
#include "src/plan/communication.hpp"
#include "src/plan/cross_node.hpp"
#include "src/plan/flops.hpp"
#include "src/plan/parameter_count.hpp"
#include "src/plan/parameter_memory.hpp"
#include "src/plan/plan.hpp"
#include "tests/mpi_test_util.hpp"
#include "tests/plan/plan_test_util.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;
using namespace tptrain::plan;
using parallel::RankOrder;

namespace {

// The llama block of test::llama with the mixture of experts as its MLP: the mixtral preset.
model::GptShape mixtral(int layers, int hidden, int heads, int kv_heads, int ffn, int experts, int per_token, int vocab,
                        int seq) {
  model::GptShape s = test::llama(layers, hidden, heads, kv_heads, ffn, vocab, seq);
  s.architecture = "mixtral";
  s.mlp = "moe";
  s.experts = experts;
  s.experts_per_token = per_token;
  return s;
}

// Mixtral-8x7B (Jiang et al. 2024; Hugging Face's config.json): 32 layers, hidden 4096, 32 heads, 8
// key/value heads, 8 experts of ffn 14336, 2 per token, vocabulary 32000.
model::GptShape mixtral_8x7b() { return mixtral(32, 4096, 32, 8, 14336, 8, 2, 32000, 4096); }

// A small mixture whose buffers are easy to count: h 32, a 4 (d 8), k 2, f 48, E 4, K 2, S 16,
// b 2, pipeline 2, data 4 (global batch 16: 2 micro-batches per data rank), bf16.
Config small_moe(int tensor, int expert, bool sp = false, Recompute r = Recompute::selective) {
  Config c;
  c.shape = mixtral(4, 32, 4, 2, 48, 4, 2, 250, 16);
  c.shape.vocab_pad_multiple = 8;
  c.shape.tensor = tensor;
  c.shape.expert = expert;
  c.pipeline = 2;
  c.data = 4;
  c.global_batch = 16;
  c.micro_batch = 2;
  c.sequence_parallel = sp;
  c.recompute = r;
  c.precision = "bf16";
  return c;
}

io::Deck shipped(const std::string& name, const std::vector<std::string>& sets = {}) {
  return io::load_deck(std::string(TPTRAIN_SOURCE_DIR) + "/input/" + name, sets, io::DataFiles::may_be_absent);
}

}  // namespace

TEST_CASE("plan: Mixtral-8x7B has 46,702,792,704 parameters, 12,879,925,248 active", "[plan][moe]") {
  const model::GptShape s = mixtral_8x7b();
  // The published count (Hugging Face's MixtralForCausalLM, num_parameters()).
  CHECK(exact_parameters(s) == 46702792704);
  CHECK(moe_parameters(32, 4096, 32, 8, 14336, 8, 8, 32000, false) == 46702792704.0);
  // Active per token, by hand: per block q, k, v, o (h·(a + 2k)·d + a·d·h), the router E·h, two
  // RMSNorms and K = 2 experts' gate, up and down; the embedding and lm_head, the final norm.
  const std::int64_t h = 4096, d = 128, f = 14336, E = 8, K = 2, V = 32000, l = 32;
  const std::int64_t block = h * (32 + 2 * 8) * d + 32 * d * h + E * h + 2 * h + K * 3 * h * f;
  const std::int64_t active = l * block + 2 * V * h + h;
  CHECK(active == 12879925248);
  CHECK(active_parameters(s) == active);
  CHECK(moe_parameters(32, 4096, 32, 8, 14336, 8, 2, 32000, false) == double(active));
  // The rest are the other 6 experts of every block.
  CHECK(exact_parameters(s) - active_parameters(s) == l * (E - K) * 3 * h * f);
  CHECK(expert_parameters(s) == 3 * h * f);
  // Tensor parallelism pads nothing here (32000 = 250 x 128) and changes no count.
  model::GptShape t4 = s;
  t4.tensor = 4;
  CHECK(exact_parameters(t4) == 46702792704);
  // A dense MLP has no inactive parameters.
  model::GptShape dense = s;
  dense.mlp = "swiglu";
  CHECK(active_parameters(dense) == exact_parameters(dense));
  CHECK(expert_parameters(dense) == 0);
}

// DeepSeekMoE's blocks (model.moe_ffn_hidden, model.moe_shared_experts, model.moe_dense_layers)
// and a multi-token prediction module: the counts against the model's tensors and by hand, and
// each rank's against what a TrainingRun holds (the module and the word embedding's copy on the
// last stage), the dense first blocks spread over the stages by interleaving (2 ranks: layers 0 and 2 on
// stage 0, 1 and 3 on stage 1).
TEST_CASE("plan: DeepSeekMoE's dense first blocks, fine-grained and shared experts count as the model holds them",
          "[plan][moe][mpi]") {
  const int n = test::world_size();
  io::Deck deck = test::pipeline_deck(1, n, 1, 2);
  deck.model.architecture = "mixtral";
  deck.model.take_preset_defaults();
  deck.model.kv_heads = 2;
  deck.model.vocab_size = 250;
  deck.model.experts = 4;
  deck.model.experts_per_token = 2;
  deck.model.moe_ffn_hidden = 16;
  deck.model.moe_shared_experts = 2;
  deck.model.moe_dense_layers = 3;
  deck.model.mtp_depth = 1;  // a multi-token prediction module on the last stage
  if (n == 2) deck.parallel.virtual_stages = 2;
  const Config c = config_of(deck);
  const model::GptShape& s = c.shape;
  std::int64_t tensors = 0;
  for (const model::LogicalTensor& t : model::logical_tensors(s))
    tensors += std::accumulate(t.shape.begin(), t.shape.end(), std::int64_t(1), std::multiplies<>());
  CHECK(exact_parameters(s) == tensors);
  // By hand: h 32, 4 heads of 8, 2 key/value heads, dense f 64, experts f_e 16, E 4, K 2, 2 shared.
  const std::int64_t h = 32, f = 64, fe = 16, E = 4, K = 2, shared = 2 * fe, V = 250;
  const std::int64_t attention = h * (4 + 2 * 2) * 8 + 4 * 8 * h + 2 * h;  // q, k, v, o and the two norms
  const std::int64_t dense = attention + 3 * h * f, mixture = attention + E * h + 3 * h * shared;
  // The module: enorm, hnorm, eh_proj [h, 2h], a mixture block, final_norm.
  const std::int64_t mtp = 3 * h + 2 * h * h + mixture;
  CHECK(exact_parameters(s) == 3 * dense + (mixture + E * 3 * h * fe) + 2 * V * h + h + mtp + E * 3 * h * fe);
  CHECK(active_parameters(s) == 3 * dense + (mixture + K * 3 * h * fe) + 2 * V * h + h + mtp + K * 3 * h * fe);
  CHECK(expert_parameters(s) == 3 * h * fe);

  parallel::Topology topo(MPI_COMM_WORLD, parallel::layout_of(deck));
  train::RunOptions options;
  options.synthetic_tokens = 4096;
  train::TrainingRun<float> run(deck, topo, options);
  const StageParameters stages = stage_parameters(s, c.pipeline, c.virtual_stages);
  const int stage = topo.coords().pp;
  std::int64_t experts = 0;
  for (const model::Parameter<float>* p : run.model().parameters())
    if (p->name.find("mlp/experts/") != std::string::npos) experts += p->local_size();
  INFO("stage " << stage << " of " << c.pipeline << " in " << c.virtual_stages << " chunks");
  CHECK(run.parameter_memory().parameters == stages.of(stage));
  CHECK(experts == stages.experts_of(stage));
}

TEST_CASE("plan: the shipped Mixtral-8x7B deck fits its layout on 80 GiB", "[plan][moe]") {
  const io::Deck deck = shipped("mixtral-8x7b.toml");
  Hardware hw;
  hw.peak_tflops = 989;  // H100 SXM, bf16 dense
  const Plan p = make_plan(deck, hw);
  CHECK(p.parameters == 46702792704);
  CHECK(p.parameters_moe == 46702792704.0);
  CHECK(p.active_parameters == 12879925248);
  CHECK(p.active_parameters_formula == 12879925248.0);
  CHECK(p.config.expert() == 8);
  CHECK(model::local_experts(p.config.shape) == 1);
  CHECK(p.ok());
  CHECK(p.memory.total() < std::int64_t(80) << 30);
  // 6NT and eq. 4 count the active parameters.
  CHECK(p.total_flops_6nt == Approx(6.0 * 12879925248.0 * p.tokens));
  // Each rank of the 8 of a node's expert group: the all-to-alls stay inside the node under the
  // deck's tp-dp-pp, and cross nodes under tp-pp-dp.
  for (const CrossNodeBytes& x : p.cross_node) {
    if (x.order == RankOrder::tp_dp_pp) CHECK(x.expert == 0);
    else CHECK(x.expert > 0);
  }
  CHECK(p.communication.expert > 0);
  const std::string text = report(p), json = report_json(p);
  CHECK(text.find("46702792704 exactly (tptrain's tensors), 46702792704 by Mixtral's formula") != std::string::npos);
  CHECK(text.find("active       12.88 B per token: 12879925248") != std::string::npos);
  CHECK(json.find("\"params_active\": 12879925248") != std::string::npos);
  CHECK(json.find("\"expert\": 8") != std::string::npos);
}

TEST_CASE("plan: FLOPs count the router and K of the E experts", "[plan][moe][bench]") {
  const model::GptShape s = mixtral_8x7b();
  const double h = 4096, kv = 8 * 128, f = 14336, E = 8, K = 2, S = 4096, V = 32000, L = 32;
  // Per token and block, forward: Q and o_proj h² each, K and V h·kv each, the router E·h (fp32
  // logits), K experts' gate, up and down 3·h·f each; the attention products 4·S·h.
  const double block = 2.0 * (h * (h + 2 * kv) + h * h + E * h + K * 3 * h * f) + 4.0 * S * h;
  CHECK(model::block_forward_flops_per_token(s) == block);
  // 6N + 12LSH with N the active parameters but the untied word embedding (a lookup).
  CHECK(model::flops_parameters(s) == 12879925248.0 - V * h);
  CHECK(model::training_flops_per_token(s) == 6.0 * (12879925248.0 - V * h) + 12.0 * L * S * h);
  // A recomputed forward: one block's forward, the same formula.
  CHECK(model::forward_flops_per_token(s, 1, false) == block);
  // The plan's FLOPs per iteration (B = 1024 sequences): 3 passes of every block and the logits,
  // the attention core again with selective recomputation, the blocks' forward again with full.
  Config c;
  c.shape = s;
  c.global_batch = 1024;
  const double B = 1024, logits = 2.0 * B * S * h * V;
  CHECK(flops_per_iteration(c, Recompute::none) == Approx(3 * L * B * S * block + 3 * logits).epsilon(1e-12));
  CHECK(flops_per_iteration(c, Recompute::selective) ==
        Approx(3 * L * B * S * block + L * 4 * B * S * S * h + 3 * logits).epsilon(1e-12));
  CHECK(flops_per_iteration(c, Recompute::full) == Approx(4 * L * B * S * block + 3 * logits).epsilon(1e-12));
  // Expert parallelism moves the work, not its amount.
  c.shape.expert = 8;
  CHECK(model::block_forward_flops_per_token(c.shape) == block);
  // All E experts per token would cost the dense model of the same parameters.
  model::GptShape all = s;
  all.experts_per_token = 8;
  CHECK(model::flops_parameters(all) == 46702792704.0 - V * h);
}

TEST_CASE("plan: a rank holds E / ep experts; their state is sharded over the expert-data group", "[plan][moe]") {
  // Mixtral-8x7B on tensor 2 x pipeline 4 x data 8, bf16, distributed optimizer.
  Config c;
  c.shape = mixtral_8x7b();
  c.shape.tensor = 2;
  c.pipeline = 4;
  c.data = 8;
  c.global_batch = 1024;
  c.micro_batch = 1;
  c.precision = "bf16";
  c.distributed_optimizer = true;
  const std::int64_t h = 4096, f = 14336, l = 8;  // layers per stage
  const std::int64_t expert_on_rank = 3 * h * f / 2;     // gate|up and down, split over 2 tensor ranks
  const std::int64_t dense_block = (48 * 128 * h + h * h) / 2 + 8 * h + 2 * h;  // attention split; router, norms whole
  const std::int64_t embedding = 32000 * h / 2;
  std::int64_t previous_total = 0;
  for (const int ep : {1, 2, 4, 8}) {
    INFO("parallel.expert = " << ep);
    c.shape.expert = ep;
    REQUIRE(c.layout_problem().empty());
    const StageParameters sp = stage_parameters(c.shape, c.pipeline);
    const std::int64_t experts = l * (8 / ep) * expert_on_rank;
    CHECK(sp.experts_of(0) == experts);
    CHECK(sp.of(0) == l * dense_block + embedding + experts);
    CHECK(sp.dense_of(1) == l * dense_block);
    // Weights and gradients whole; the optimizer's master weights and moments sharded: the dense
    // ones over data 8, the experts' over data / ep.
    const ParameterBytes b = parameter_bytes(sp.of(0), c, sp.experts_of(0));
    const std::int64_t dense = sp.of(0) - experts, edp = 8 / ep;
    const std::int64_t shards = (dense + 7) / 8 + (experts + edp - 1) / edp;
    CHECK(b.weights == 2 * sp.of(0));
    CHECK(b.gradients == 4 * sp.of(0));
    CHECK(b.master == 4 * shards);
    CHECK(b.optimizer == 8 * shards);
    CHECK(c.expert_data_context() == edp);
    const RankMemory r = most_loaded_rank(c, sp);
    CHECK(r.expert_parameters == experts);
    CHECK(r.parameter_bytes.total() == b.total());
    if (previous_total > 0) CHECK(r.total() < previous_total);  // more expert ranks, less memory per rank
    previous_total = r.total();
  }
  // Without a distributed optimizer every rank keeps its experts' whole state: 18 bytes each.
  c.distributed_optimizer = false;
  c.shape.expert = 8;
  const StageParameters sp = stage_parameters(c.shape, c.pipeline);
  CHECK(parameter_bytes(sp.of(0), c, sp.experts_of(0)).total() == 18 * sp.of(0));
  // With context parallelism the groups are data x context and data / ep x context.
  c.shape.context = 2;
  CHECK(c.data_context() == 16);
  CHECK(c.expert_data_context() == 2);
}

TEST_CASE("plan: the MoE buffers at balanced load, by hand", "[plan][moe]") {
  for (const int t : {1, 2})
    for (const bool sp : {false, true})
      for (const int ep : {1, 2, 4}) {
        if (sp && t == 1) continue;
        INFO("tensor " << t << (sp ? ", sequence parallel" : "") << ", expert " << ep);
        Config c = small_moe(t, ep, sp);
        REQUIRE(c.layout_problem().empty());
        // N = b·S = 32 tokens, K = 2 copies each: R = 64 rows; E = 4, h 32, f/t = 48/t, bf16.
        const std::int64_t N = 32, R = 64, E = 4, K = 2, h = 32, f_t = 48 / t, e = 2;
        const std::int64_t saved = N * E * 4 + N * 4 + 2 * N * K * 4 + N * K * 4 + R * h * e + R * 2 * f_t * e + R * h * e;
        CHECK(total_bytes(moe_saved_buffers(c)) == saved);
        // The block's other kept buffers are the dense llama block's without its gate|up.
        Config dense = c;
        dense.shape.mlp = "swiglu";
        dense.shape.expert = 1;
        CHECK(total_bytes(layer_activations(c)) == total_bytes(layer_activations(dense)) - N * 2 * f_t * e + saved);
        // Scratch: silu(gate)·up and its gradient, gate|up's gradient, the input rows' gradient; with
        // expert parallelism three more [R, h] buffers; the gathered output gradient with sequence
        // parallelism; the router's fp32 gradients and statistics.
        const std::int64_t scratch = 2 * R * f_t * e + R * 2 * f_t * e + R * h * e + (ep > 1 ? 3 * R * h * e : 0) +
                                     (sp ? N * h * e : 0) + N * K * 4 + N * E * 4 + (2 * E + 1) * 4;
        CHECK(total_bytes(moe_scratch(c)) == scratch);
        // The shared region is the attention's alone: no dense MLP is built.
        const std::vector<Buffer> ws = block_scratch(c), dense_ws = block_scratch(dense);
        CHECK(total_bytes(ws) - scratch <= total_bytes(dense_ws));
        // Full recomputation keeps the MoE set once per stage, in the working set.
        Config full = c;
        full.recompute = Recompute::full;
        CHECK(total_bytes(moe_saved_buffers(full)) == saved);
        CHECK(total_bytes(recompute_working_set(full)) ==
              total_bytes(recompute_working_set([&] {
                Config d = dense;
                d.recompute = Recompute::full;
                return d;
              }())) -
                  N * 2 * f_t * e + saved);
        CHECK(total_bytes(layer_activations(full)) == N / (sp ? t : 1) * h * e);  // the block input alone
      }
}

TEST_CASE("plan: all-to-all bytes per step, by formula", "[plan][moe]") {
  for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
    for (const int ep : {1, 2, 4}) {
      INFO("recompute " << recompute_name(r) << ", expert " << ep);
      const Config c = small_moe(2, ep, true, r);
      const StageParameters sp = stage_parameters(c.shape, c.pipeline);
      // Per layer and micro-batch 2 all-to-alls forward and 2 backward (2 more with full
      // recomputation) of N·K = 64 rows of h = 32 bf16 features, (ep − 1)/ep of them sent away; 2
      // layers per stage, 2 micro-batches per step.
      const double a2a = 64.0 * 32 * 2, count = r == Recompute::full ? 6 : 4;
      CHECK(expert_all_to_all_bytes(c) == a2a);
      CHECK(expert_all_to_alls(c) == (ep > 1 ? count : 0));
      const double per_step = ep > 1 ? 2 * 2 * count * a2a * (ep - 1) / ep : 0.0;
      for (const int stage : {0, 1}) {
        const StepCommunication s = stage_communication(c, stage, sp.of(stage), sp.experts_of(stage));
        CHECK(s.expert == Approx(per_step).epsilon(1e-15));
        // The dense gradients over data 4, the experts' over data / ep (fp32, all-reduced).
        CHECK(s.data == Approx(all_reduce_bytes(double(sp.dense_of(stage)) * 4, 4)).epsilon(1e-15));
        CHECK(s.expert_data == Approx(all_reduce_bytes(double(sp.experts_of(0)) * 4, 4 / ep)).epsilon(1e-15));
      }
      CHECK(busiest_communication(c, sp).expert == Approx(per_step).epsilon(1e-15));
    }
  // Mixtral-8x7B, the shipped layout's group: 64 MiB per all-to-all (4096 tokens x 2 copies x 4096
  // features x 2 bytes), 7/8 sent away, 4 per layer, 8 layers, 64 micro-batches: 112 GiB per step.
  const Config m = config_of(shipped("mixtral-8x7b.toml"));
  CHECK(expert_all_to_all_bytes(m) == 64.0 * 1024 * 1024);
  const StageParameters msp = stage_parameters(m.shape, m.pipeline);
  CHECK(stage_communication(m, 0, msp.of(0), msp.experts_of(0)).expert == 112.0 * 1024 * 1024 * 1024);
}

namespace {

// The all-to-all crossings by definition: every group of the rank map, its ordered pairs on
// different nodes.
std::int64_t pairs_across(const std::vector<std::int64_t>& members, std::int64_t g) {
  std::int64_t n = 0;
  for (const std::int64_t a : members)
    for (const std::int64_t b : members) n += a / g != b / g;
  return n;
}
std::int64_t nodes_of_ring(const std::vector<std::int64_t>& members, std::int64_t g) {
  std::set<std::int64_t> nodes;
  for (const std::int64_t r : members) nodes.insert(r / g);
  return nodes.size() > 1 ? std::int64_t(nodes.size()) : 0;
}

// A mixture of 12 experts (divisible by every expert size of data 1 .. 6) on a small shape.
Config small_layout(int T, int C, int P, int D, int ep) {
  Config c;
  c.shape = mixtral(6, 16, 4, 2, 8, 12, 2, 64, 8);
  c.shape.vocab_pad_multiple = 4;
  c.shape.tensor = T;
  c.shape.expert = ep;
  c.pipeline = P;
  c.data = D;
  c.global_batch = 2 * 2 * D;
  c.micro_batch = 2;
  c.precision = "bf16";
  c.distributed_optimizer = D > 1;
  c.set_context(C);
  return c;
}

}  // namespace

TEST_CASE("cross-node: all-to-all crossings equal their definition", "[plan][moe][cross_node]") {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::int64_t stride = 1 + rng() % 12, members = 1 + rng() % 7, blocks = 1 + rng() % 6;
    const std::int64_t world = stride * members * blocks, g = 1 + rng() % 30;
    std::int64_t want = 0;
    for (std::int64_t b = 0; b < stride; ++b)
      for (std::int64_t q = 0; q < blocks; ++q) {
        std::vector<std::int64_t> group;
        for (std::int64_t j = 0; j < members; ++j) group.push_back(b + stride * (members * q + j));
        want += pairs_across(group, g);
      }
    INFO("world " << world << " stride " << stride << " members " << members << ", " << g << " GPUs per node");
    REQUIRE(all_to_all_crossings(world, stride, members, g).value() == want);
  }
  // Every member on its own node, and every group inside one.
  CHECK(all_to_all_crossings(64, 8, 8, 8).value() == 64 * 7);
  CHECK(all_to_all_crossings(64, 1, 8, 8).value() == 0);
  // 2^31 − 8 ranks in groups of 8 consecutive data ranks 3 apart, nodes of 7: bounded time.
  const auto start = std::chrono::steady_clock::now();
  CHECK(all_to_all_crossings(2147483640, 3, 8, 7).value() > 0);
  CHECK(all_to_all_crossings(2147483640, 3, 8, 65537).value() > 0);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 1.0);
}

TEST_CASE("cross-node: the expert groups of every small layout against the rank map", "[plan][moe][cross_node]") {
  for (const RankOrder order : {RankOrder::tp_pp_dp, RankOrder::tp_dp_pp})
    for (const int C : {1, 2})
      for (const int T : {1, 2})
        for (const int P : {1, 2, 3})
          for (const int D : {1, 2, 3, 4, 6})
            for (int ep = 1; ep <= D; ++ep) {
              if (D % ep != 0) continue;
              const Config c = small_layout(T, C, P, D, ep);
              REQUIRE(c.layout_problem().empty());
              const StageParameters sp = stage_parameters(c.shape, P);
              parallel::Layout L{T, P, D, order, C};
              L.expert = ep;
              // The expert groups (tp, cp, pp, edp) and the expert-data groups (tp, pp, ep): their
              // members by the rank map's coordinates.
              std::map<std::array<int, 4>, std::vector<std::int64_t>> experts;
              std::map<std::array<int, 3>, std::vector<std::int64_t>> expert_data;
              for (int r = 0; r < L.world_size(); ++r) {
                const parallel::Coordinates x = parallel::coordinates_of(r, L);
                experts[{x.tp, x.cp, x.pp, x.edp}].push_back(r);
                expert_data[{x.pp, x.tp, x.ep}].push_back(r);
              }
              const std::int64_t world = c.world();
              for (std::int64_t g = 1; g <= world + 1; ++g) {
                INFO("tensor " << T << " context " << C << " pipeline " << P << " data " << D << " expert " << ep
                               << ", order " << parallel::rank_order_name(order) << ", " << g << " GPUs per node");
                double a2a = 0, gradients = 0;
                for (const auto& [key, members] : experts) {
                  REQUIRE(members.size() == std::size_t(ep));
                  a2a += double(pairs_across(members, g));
                }
                for (const auto& [key, members] : expert_data) {
                  REQUIRE(members.size() == std::size_t(C * D / ep));
                  gradients += double(nodes_of_ring(members, g)) *
                               stage_communication(c, key[0], sp.of(key[0]), sp.experts_of(0)).expert_data;
                }
                const double per_rank = stage_communication(c, 0, sp.of(0), sp.experts_of(0)).expert;
                const CrossNodeBytes got = cross_node_bytes(c, sp, order, g);
                CHECK(got.expert == Approx(ep > 1 ? a2a * per_rank / (ep - 1) : 0.0).epsilon(1e-12));
                CHECK(got.expert_data == Approx(gradients).epsilon(1e-12));
              }
            }
}

TEST_CASE("plan: the layout search varies parallel.expert", "[plan][moe]") {
  // Mixtral-8x7B without expert parallelism on tensor 2 x pipeline 4 x data 8 needs 56 GiB; on
  // GPUs of 40 GiB the nearest layouts that fit split the experts.
  const io::Deck deck = shipped("mixtral-8x7b.toml",
                                {"parallel.tensor=2", "parallel.data=8", "parallel.expert=1",
                                 "parallel.sequence_parallel=true"});
  Hardware hw;
  hw.gpu_memory_gib = 40;
  const Plan p = make_plan(deck, hw);
  REQUIRE_FALSE(p.fits);
  REQUIRE_FALSE(p.suggestions.empty());
  // One key changed, the experts split (8 or 4 ways: the faster simulated step first).
  REQUIRE(p.suggestions.front().sets.size() == 1);
  CHECK(p.suggestions.front().sets.front().rfind("parallel.expert=", 0) == 0);
  for (const Suggestion& s : p.suggestions) {
    INFO(s.sets.front());
    CHECK(s.config.layout_problem().empty());
    CHECK(double(s.bytes) <= 40.0 * (1 << 30));
    CHECK(s.config.data % s.config.expert() == 0);
    CHECK(s.config.shape.experts % s.config.expert() == 0);
  }
  // The rules of parallel.expert, as the deck loader states them (rules::expert_problems).
  Config c = small_moe(1, 3);
  CHECK(c.layout_problem().find("parallel.data = 4 is not a multiple of parallel.expert = 3") != std::string::npos);
  c = small_moe(1, 1);
  c.shape.mlp = "swiglu";
  c.shape.expert = 2;
  CHECK(c.layout_problem().find("parallel.expert = 2: expected 1 without a mixture of experts") != std::string::npos);
}

TEST_CASE("plan: E experts count E times one expert's rows in time independent of E", "[plan][moe]") {
  // The counts take one expert's rows from the descriptor's table and multiply them
  // (block_parameter_kinds); they expanded E copies of the rows, O(E) time and memory per count,
  // called for every layout the search tries: 2^20 experts took seconds here, 2^31 - 1 a bad_alloc.
  const auto counted_by_rows = [](const model::GptShape& s, int ep_rank) {
    std::int64_t n = 0;  // the expanded rows, as the model builds them (src/model/transformer_layer.hpp)
    for (const model::ParameterRow& r : model::block_parameter_rows(s))
      if (model::held_by_expert_rank(s, r.name, ep_rank)) n += model::spec_of(r, s).local_elements(s.tensor);
    return n;
  };
  const std::int64_t l = 4, h = 32, f = 48, one = 3 * h * f;  // an expert: gate|up [2f, h], down [h, f]
  model::GptShape few = mixtral(4, 32, 4, 2, 48, 4, 2, 250, 16);
  few.tensor = 2;
  few.expert = 4;
  // The table's counts against the expanded rows, on every expert rank of a small mixture.
  model::GptShape some = few;
  some.experts = 64;
  for (int r = 0; r < 4; ++r) CHECK(counted_by_rows(some, r) == stage_parameters(some, 4).of(1));  // a middle stage: a block
  CHECK(stage_parameters(some, 2).experts_of(1) == (l / 2) * 16 * one / 2);

  const auto start = std::chrono::steady_clock::now();
  model::GptShape many = few;
  many.experts = 1 << 20;
  many.expert = 1 << 10;
  const std::int64_t more = many.experts - few.experts;
  CHECK(expert_parameters(many) == one);
  // Every block: the experts' rows and the router's [E, h].
  CHECK(exact_parameters(many) - exact_parameters(few) == l * more * (one + h));
  CHECK(active_parameters(many) - active_parameters(few) == l * more * h);
  // A rank: its E / ep = 1024 experts, split over the 2 tensor ranks; the router whole.
  const StageParameters sp = stage_parameters(many, 2), sp_few = stage_parameters(few, 2);
  CHECK(sp.experts_of(0) == (l / 2) * 1024 * one / 2);
  CHECK(sp.dense_of(1) - sp_few.dense_of(1) == (l / 2) * more * h);
  CHECK(model::block_forward_flops_per_token(many) - model::block_forward_flops_per_token(few) == 2.0 * more * h);
  // The whole plan of 2^16 experts on 2^16 expert ranks, without the layout search (the CLI test
  // cli_plan_65536_experts runs it).
  Config c = small_moe(1, 1 << 16);
  c.shape.experts = 1 << 16;
  c.data = 1 << 16;
  c.pipeline = 1;
  c.global_batch = c.data * c.micro_batch;
  const Plan p = make_plan(c, Hardware{}, 1e9, "", false);
  CHECK(p.memory.expert_parameters == l * one);
  CHECK(p.parameters == exact_parameters(c.shape));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 1.0);
}
