// `tptrain plan` with context parallelism (parallel.context = C; docs/planning.md, "Context
// parallelism"): a rank's activations are those of seq_length / C tokens but for ring attention's
// buffers and the rotary tables (whole sequence); every byte against what a model stage
// allocates; the distributed optimizer shards over data x context; the context ring's bytes
// against a hand count; the layout search suggests parallel.context for a long sequence that does
// not fit without it; the shipped 128K deck fits.
#include "catch.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "src/model/gpt_model.hpp"
#include "src/model/shape_of_deck.hpp"
#include "src/parallel/topology.hpp"
#include "src/plan/activation_memory.hpp"
#include "src/plan/communication.hpp"
#include "src/plan/parameter_memory.hpp"
#include "src/plan/plan.hpp"
#include "tests/mpi_test_util.hpp"
#include "tests/plan/plan_test_util.hpp"

using namespace tptrain;
using namespace tptrain::plan;

namespace {

// The plan tests' small llama (tests/plan/plan_test_util.hpp) at S 64, tensor 2 with sequence
// parallelism, bf16, flash attention (ring attention runs it), over `context` ranks.
Config small_llama(int context, int seq_length = 64) {
  Config c = test::small_llama(2, true, Recompute::selective, "bf16", 2, true, seq_length);
  c.shape.context = context;
  return c;
}

std::map<std::string, std::int64_t> by_name(const std::vector<Buffer>& buffers) {
  std::map<std::string, std::int64_t> out;
  for (const Buffer& b : buffers) out[b.name] += b.bytes;
  return out;
}

io::Deck shipped(const std::string& name, const std::vector<std::string>& sets = {}) {
  return io::load_deck(std::string(TPTRAIN_SOURCE_DIR) + "/input/" + name, sets, io::DataFiles::may_be_absent);
}

bool sets_key(const Suggestion& s, const std::string& key) {
  return std::any_of(s.sets.begin(), s.sets.end(), [&](const std::string& k) { return k.rfind(key + "=", 0) == 0; });
}

}  // namespace

TEST_CASE("plan: with context 4 a rank's activations are those of seq_length / 4", "[plan][context]") {
  for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
    for (const bool sp : {false, true}) {
      Config split = small_llama(4);  // S 64 over 4 context ranks: 16 tokens each
      Config quarter = small_llama(1, 16);
      for (Config* c : {&split, &quarter}) {
        c->recompute = r;
        c->sequence_parallel = sp;
      }
      INFO("recompute " << recompute_name(r) << (sp ? ", sequence parallel" : ""));
      // Kept per layer, the recompute working set, the stage, the head: buffer by buffer the same.
      CHECK(by_name(layer_activations(split)) == by_name(layer_activations(quarter)));
      CHECK(by_name(recompute_working_set(split)) == by_name(recompute_working_set(quarter)));
      CHECK(by_name(head_buffers(split)) == by_name(head_buffers(quarter)));
      CHECK(stage_activation_bytes(split, 2, 3) == stage_activation_bytes(quarter, 2, 3));
      CHECK(stage_gradients(split) == stage_gradients(quarter));
      CHECK(sequence_parallel_buffers(split) == sequence_parallel_buffers(quarter));
      // The workspace: the rotary tables cover the whole sequence (positions are global), and the
      // attention's part of the shared region adds ring attention's buffers. By hand, bf16 (e 2),
      // N = b·S/C = 32 tokens, K,V width 2·(k/t)·d = 16, every buffer a multiple of 128 bytes:
      const std::int64_t N = 32, e = 2;
      const std::int64_t rope = 2 * 64 * 4 * 4;  // cos and sin, [S, d/2] fp32
      const std::int64_t d_qkv = N * (4 + 2 * 2) * 8 / 2 * e, dq_sum = N * 16 * 4, delta = N * 2 * 4;
      // kv_0 and kv_1; o_sum; dkv_0, dkv_1 and dkv_in
      const std::int64_t ring = 2 * N * 16 * e + N * 16 * 4 + 3 * N * 16 * 4;
      const std::int64_t mlp = N * 24 * e + N * 48 * e;                         // mlp.a, mlp.dh
      const std::map<std::string, std::int64_t> a = by_name(block_scratch(split)), b = by_name(block_scratch(quarter));
      REQUIRE(a.size() == b.size());
      for (const auto& [name, bytes] : a) {
        INFO(name);
        if (name.find("rotary") != std::string::npos) {
          CHECK(bytes == rope / 2);
          CHECK(b.at(name) == rope / 2 / 4);
        } else if (name.find("one region") != std::string::npos) {
          CHECK(bytes == std::max(d_qkv + dq_sum + delta + ring, mlp));
          CHECK(b.at(name) == std::max(d_qkv + dq_sum + delta, mlp));
          CHECK(bytes > b.at(name));  // here the ring makes the attention's part the larger
        } else {
          CHECK(bytes == b.at(name));
        }
      }
    }
  // The most loaded rank: activations and head as at S/4; the plan divides them by the chunks.
  const Config split = small_llama(4), quarter = small_llama(1, 16), whole = small_llama(1);
  const RankMemory s = most_loaded_rank(split), q = most_loaded_rank(quarter), w = most_loaded_rank(whole);
  CHECK(s.activations == q.activations);
  CHECK(s.head == q.head);
  CHECK(w.activations == 4 * q.activations);
}

TEST_CASE("plan: the distributed optimizer shards over data x context", "[plan][context]") {
  Config c = small_llama(4);
  c.data = 2;
  c.distributed_optimizer = true;
  CHECK(c.data_context() == 8);
  CHECK(c.world() == 2 * 4 * 2 * 2);
  const ParameterBytes p = parameter_bytes(1000, c);
  CHECK(p.optimizer == 125 * 8);  // ⌈1000 / 8⌉ moments' elements
  CHECK(p.master == 125 * 4);
  CHECK(p.total() == 6 * 1000 + 12 * 125);  // 6 + 12/(d·C)
  // The gradients are reduce-scattered and the weights all-gathered over the 8 ranks.
  const StepCommunication x = stage_communication(c, 0, 1000);
  CHECK(x.data == Approx(all_gather_bytes(1000 * 4.0, 8) + all_gather_bytes(1000 * 2.0, 8)));
}

TEST_CASE("plan: the context ring's bytes per step, counted by hand", "[plan][context]") {
  // Llama-3-8B at 131072 tokens, tensor 8 x context 8, bf16, 32 micro-batches of 1 sequence.
  Config c;
  static_cast<model::BlockSpec&>(c.shape) = model::block_preset("llama")->spec;
  c.shape.layers = 32;
  c.shape.hidden = 4096;
  c.shape.heads = 32;
  c.shape.kv_heads = 8;
  c.shape.ffn_hidden = 14336;
  c.shape.seq_length = 131072;
  c.shape.vocab_size = 128256;
  c.shape.vocab_pad_multiple = 128;
  c.shape.tensor = 8;
  c.shape.context = 8;
  c.global_batch = 32;
  c.micro_batch = 1;
  c.precision = "bf16";
  c.sequence_parallel = true;
  c.recompute = Recompute::selective;
  // A rank's K,V block: 16384 tokens x (K and V of 1 key/value head of 128) x 2 bytes = 8 MiB; its
  // dK, dV sums in fp32 16 MiB. Per layer and micro-batch: 7 blocks forward; 7 blocks and 8 sums
  // backward.
  const double MiB = 1024.0 * 1024.0;
  CHECK(context_kv_block_bytes(c) == 8 * MiB);
  CHECK(context_layer_bytes(c) == 7 * 8 * MiB + 7 * 8 * MiB + 8 * 16 * MiB);
  const StepCommunication s = stage_communication(c, 0, 1000);
  CHECK(s.context == 32.0 * 32 * (56 + 56 + 128) * MiB);  // 240 GiB per step
  // Full recomputation runs the forward's ring again.
  Config full = c;
  full.recompute = Recompute::full;
  CHECK(stage_communication(full, 0, 1000).context == 32.0 * 32 * (56 + 56 + 56 + 128) * MiB);
  // Pipeline stages share the layers: 4 stages send a quarter each.
  Config staged = c;
  staged.pipeline = 4;
  for (const int p : {0, 1, 3}) CHECK(stage_communication(staged, p, 1000).context == s.context / 4);
  // The tensor group's collectives move the rank's 16384 tokens, not the sequence's 131072.
  Config one = c;
  one.shape.context = 1;
  one.shape.seq_length = 16384;
  CHECK(s.tensor == Approx(stage_communication(one, 0, 1000).tensor).epsilon(1e-12));
  // Without context parallelism no ring.
  Config none = c;
  none.shape.context = 1;
  CHECK(stage_communication(none, 0, 1000).context == 0);
  CHECK(context_layer_bytes(none) == 0);
}

// The plan's inventory under context parallelism is the model's, byte for byte: a model stage
// of parallel.context = C (the world's ranks, or tensor 2 x context 2 on 4) allocates the rank's
// S/C rows, ring attention's buffers and the whole sequence's rotary tables. Runs on 2 and 4 ranks
// (the mpi tests); one rank has no context group to build.
TEST_CASE("plan: with context parallelism the inventory is what a model stage allocates", "[plan][context][mpi]") {
  const int n = test::world_size();
  std::vector<std::pair<int, int>> layouts;  // (tensor, context)
  if (n > 1) layouts.push_back({1, n});
  if (n == 4) layouts.push_back({2, 2});
  for (const auto& [t, context] : layouts) {
    parallel::Topology topo(MPI_COMM_WORLD, parallel::Layout{t, 1, 1, parallel::RankOrder::tp_pp_dp, context});
    for (const std::string architecture : {"gpt2", "llama"})
      for (const std::string precision : {"fp32", "bf16"})
        for (const bool sp : {false, true})
          for (const Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
            for (const int slots : {1, 3}) {
              Config c = small_llama(context, 32);
              if (architecture == "gpt2") {
                static_cast<model::BlockSpec&>(c.shape) = model::block_preset("gpt2")->spec;
                c.shape.kv_heads = 0;
                c.shape.ffn_hidden = 64;
              }
              c.shape.tensor = t;
              c.shape.sequence_parallel = sp;
              c.sequence_parallel = sp;
              c.recompute = r;
              c.precision = precision;
              INFO(architecture << ", tensor " << t << ", context " << context << ", " << precision
                                << (sp ? ", sequence parallel" : "") << ", recompute " << recompute_name(r) << ", "
                                << slots << " micro-batches in flight");
              REQUIRE(c.layout_problem().empty());
              CHECK(test::planned_stage_bytes(c, slots) ==
                    test::allocated_stage_bytes(c, topo.tp(), topo.cp(), r, slots));
            }
  }
}

TEST_CASE("plan: the layout rules of context parallelism", "[plan][context]") {
  Config c = small_llama(4);
  CHECK(c.layout_problem().empty());
  c.set_context(3);  // 64 tokens in 6 chunks
  CHECK_THAT(c.layout_problem(),
             Catch::Contains("model.seq_length = 64: expected a multiple of 2 * parallel.context = 6"));
  c.set_context(8);  // 8 tokens per rank, 4 rows per rank of tensor 2 with sequence parallelism
  CHECK(c.layout_problem().empty());
  c.shape.seq_length = 40;
  CHECK_THAT(c.layout_problem(), Catch::Contains("2 * parallel.context = 16"));
  // 80 tokens over 4 context ranks: 20 each, which sequence parallelism cannot split over 8.
  c.shape.seq_length = 80;
  c.set_context(4);
  c.shape.heads = 8;
  c.shape.kv_heads = 8;
  c.shape.ffn_hidden = 64;
  c.shape.tensor = 8;
  CHECK_THAT(c.layout_problem(), Catch::Contains("model.seq_length = 80: expected a multiple of parallel.context * "
                                                 "parallel.tensor = 32 with parallel.context = 4, parallel.tensor = 8"));
  c.sequence_parallel = false;
  CHECK(c.layout_problem().empty());
  // A deck whose attention is batched (or that scores tasks) keeps context 1.
  Config batched = small_llama(1);
  batched.context_allowed = false;
  batched.set_context(2);
  CHECK_THAT(batched.layout_problem(), Catch::Contains("parallel.context = 2: ring attention"));
  // set_context picks the attention core as model::shape_of does (model::flash_attention_of):
  // "default" is flash with context > 1 whatever the backend's default, the backend's otherwise.
  CHECK_FALSE(model::flash_attention_of("default", 1, /*backend_flash=*/false));
  CHECK(model::flash_attention_of("default", 2, /*backend_flash=*/false));
  CHECK_FALSE(model::flash_attention_of("batched", 1, /*backend_flash=*/true));
  Config core = small_llama(1);
  core.attention = "batched";
  core.set_context(1);
  CHECK_FALSE(core.shape.flash_attention);
  core.attention = "default";
  core.set_context(2);
  CHECK(core.shape.flash_attention);
}

TEST_CASE("plan: the shipped 128K Llama-3-8B deck fits tensor 8 x context 8 on 80 GB GPUs", "[plan][context][llama]") {
  const io::Deck deck = shipped("llama3-8b-128k.toml");
  const Config c = config_of(deck);
  CHECK(c.context() == 8);
  CHECK(c.shape.local_seq_length() == 16384);
  CHECK(c.shape.flash_attention);
  CHECK(c.world() == 64);
  Hardware a100;
  const Plan p = make_plan(deck, a100);
  INFO(report(p));
  CHECK(p.ok());
  CHECK(p.gpus == 64);
  CHECK(p.parameters == 8030261248);
  CHECK(p.memory.total() < std::int64_t(80) << 30);
  // The ring's bytes (above) and the optimizer's shards over data 1 x context 8.
  CHECK(p.communication.context == Approx(32.0 * 32 * context_layer_bytes(c)).epsilon(1e-12));
  CHECK(p.memory.parameter_bytes.optimizer == (p.memory.parameters + 7) / 8 * 8);
  // The report and the JSON line name the layout with its context size.
  CHECK_THAT(report(p), Catch::Contains("tensor 8 x context 8 x pipeline 1 x data 1 = 64 GPUs, order tp-cp-pp-dp"));
  CHECK_THAT(report_json(p), Catch::Contains("\"tensor\": 8, \"context\": 8, \"pipeline\": 1, \"data\": 1, "));
  CHECK_THAT(report_json(p), Catch::Contains("\"communication_bytes_per_step\": {\"tensor\": "));
  CHECK_THAT(report_json(p), Catch::Contains(", \"context\": 257698037760, \"pipeline\": 0, "));
  // Every rank's activations and logits are those of 16384 tokens: with context 1 the same deck
  // at seq_length 16384 keeps as much.
  const Plan short_deck = make_plan(
      shipped("llama3-8b-128k.toml", {"parallel.context=1", "parallel.data=8", "model.seq_length=16384"}), a100);
  CHECK(p.memory.activations == short_deck.memory.activations);
  CHECK(p.memory.head == short_deck.memory.head);
}

TEST_CASE("plan: a 128K deck that does not fit without context parallelism is offered parallel.context",
          "[plan][context][llama]") {
  // Tensor 4 (half a node) without context parallelism: a rank keeps 32768 of the 131072 tokens
  // in every layer's activations, far beyond 80 GiB.
  const std::vector<std::string> without{"parallel.tensor=4", "parallel.context=1", "parallel.data=16"};
  const io::Deck deck = shipped("llama3-8b-128k.toml", without);
  Hardware a100;
  const Plan p = make_plan(deck, a100);
  INFO(report(p));
  CHECK_FALSE(p.fits);
  REQUIRE_FALSE(p.suggestions.empty());
  bool offered = false;
  for (const Suggestion& s : p.suggestions) {
    std::string sets;
    for (const std::string& k : s.sets) sets += " " + k;
    INFO(sets);
    CHECK(s.config.world() == 64);
    CHECK(s.bytes <= std::int64_t(80) << 30);
    offered = offered || sets_key(s, "parallel.context");
    // Applied to the deck, a suggestion is a valid deck that plans as fitting.
    std::vector<std::string> applied = without;
    applied.insert(applied.end(), s.sets.begin(), s.sets.end());
    const Plan again = make_plan(shipped("llama3-8b-128k.toml", applied), a100);
    CHECK(again.ok());
    CHECK(again.memory.total() == s.bytes);
  }
  CHECK(offered);
  CHECK_THAT(report(p), Catch::Contains("--set parallel.context="));
}
