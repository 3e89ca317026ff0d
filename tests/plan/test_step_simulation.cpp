// The step simulation's logic on hand-worked cases (docs/planning.md, "The step simulation"): the
// pipeline bubbles of 1F1B and of the interleaved schedule, a data-parallel bucket reduction
// hidden by the backward but for its tail (all of it where the host drives it), ring attention's
// steps, a ring all-reduce's bytes and seconds, the GEMM model's tile and wave quantisation and
// its measured correction.
#include "catch.hpp"

#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "src/model/spec/block_descriptor.hpp"
#include "src/plan/block_time.hpp"
#include "src/plan/collective_cost.hpp"
#include "src/plan/gemm_efficiency.hpp"
#include "src/plan/layout_search.hpp"
#include "src/plan/plan.hpp"
#include "src/plan/step_simulation.hpp"
#include "tests/plan/plan_test_util.hpp"

using namespace tptrain;
using namespace tptrain::plan;


namespace {

// A machine on which only the GEMMs and the attention take time: memory, links and network so
// fast, and latencies 0, that memory-bound kernels and transfers cost nothing; one compute unit of
// 1 x 1 tiles, so that every GEMM runs at max_efficiency (no quantisation: the head's narrow
// logits GEMM costs its FLOPs' share, 8/(12·1024) of a block's).
Machine compute_only() {
  Machine m = dgx_a100_80gb();
  m.compute_units = 1;
  m.tile_m = m.tile_n = 1;
  m.memory_bandwidth_gbs = 1e15;
  m.link_bandwidth_gbs = m.network_bandwidth_gbs = 1e15;
  m.link_latency_us = m.network_latency_us = 0;
  m.kernel_overhead_us = 0;
  return m;
}

// Every stage does the same work: 8 blocks of a wide model whose embedding and head are
// negligible beside them (a vocabulary of 8 rows).
Config even_stages(int pipeline, int virtual_stages, int micro_batches) {
  Config c;
  c.shape = test::llama(8, 1024, 16, 16, 4096, 8, 512);
  c.shape.vocab_pad_multiple = 8;
  c.pipeline = pipeline;
  c.virtual_stages = virtual_stages;
  c.data = 1;
  c.micro_batch = 1;
  c.global_batch = micro_batches;
  c.precision = "bf16";
  return c;
}

// The same with mixtures of 2 of 8 experts of 1024 in every block.
Config mixture_stages(int pipeline, int virtual_stages, int micro_batches) {
  Config c = even_stages(pipeline, virtual_stages, micro_batches);
  c.shape.mlp = "moe";
  c.shape.experts = 8;
  c.shape.experts_per_token = 2;
  c.shape.moe_ffn_hidden = 1024;
  return c;
}

}  // namespace

TEST_CASE("step simulation: 1F1B idles (p - 1)/m of the ideal step", "[plan][simulation]") {
  // p = 4 stages, m = 8 micro-batches of F + B each: the step is (m + p - 1)(F + B), each rank
  // busy m(F + B), idle (p - 1)(F + B): (p - 1)/m = 3/8 of its compute.
  const StepSimulation s = simulate_step(even_stages(4, 1, 8), compute_only());
  CHECK(s.average.bubble / s.average.compute == Approx(3.0 / 8).epsilon(0.02));
  CHECK(s.step_seconds == Approx(s.average.compute * 11.0 / 8).epsilon(0.02));
}

TEST_CASE("step simulation: a rank that waits lends its core to those that compute", "[plan][simulation]") {
  // 4 ranks on 2 cores (rank_time_share 0.5, the file's rates each rank's half core): tensor 2 x
  // pipeline 2 with one micro-batch runs one stage at a time. Of the 3 ways to pair the 4 ranks on
  // the cores, one puts the computing stage's 2 ranks on one core (the file's rates), two put each
  // beside a waiting rank (a whole core, twice the rates): 2/3 of the simulated step (the
  // optimizer, both stages at once, costs nothing on this machine).
  Config c = even_stages(2, 1, 1);
  c.shape.tensor = 2;
  Machine m = compute_only();
  const StepSimulation alone = simulate_step(c, m);
  m.devices = 4;
  m.rank_time_share = 0.5;
  const StepSimulation shared = simulate_step(c, m);
  CHECK(shared.step_seconds == Approx(alone.step_seconds * 2 / 3).epsilon(1e-9));
  CHECK(shared.average.total() == Approx(shared.step_seconds).epsilon(1e-9));
  CHECK(shared.mfu == Approx(1.5 * alone.mfu).epsilon(1e-9));
  // On one stage every rank computes all the time: the shared rates are what they get.
  c.pipeline = 1;
  m.devices = 2;
  CHECK(simulate_step(c, m).step_seconds == Approx(simulate_step(c, compute_only()).step_seconds).epsilon(1e-12));
}

TEST_CASE("step simulation: interleaving idles (p - 1)/(v m)", "[plan][simulation]") {
  // v = 2 chunks per rank: the warm-up and cool-down are chunks of (F + B)/v, so (p - 1)/(v·m) =
  // 3/16.
  const StepSimulation s = simulate_step(even_stages(4, 2, 8), compute_only());
  CHECK(s.average.bubble / s.average.compute == Approx(3.0 / 16).epsilon(0.03));
  // And without pipelining there is no bubble.
  const StepSimulation one = simulate_step(even_stages(1, 1, 8), compute_only());
  CHECK(one.average.bubble == Approx(0).margin(1e-12));
}

TEST_CASE("step simulation: DeepSeek-V3's dense first blocks run their own passes", "[plan][simulation]") {
  // One stage of 8 blocks, 4 micro-batches: making the first 3 blocks dense SwiGLUs of F = 4096
  // (model.moe_dense_layers) instead of mixtures of 2 of 8 experts of 1024 changes the step's
  // compute by 4 · 3 times the two blocks' difference; on 2 stages the first stage holds them.
  const Machine m = compute_only();
  Config mixture = mixture_stages(1, 1, 4);
  Config dense_first = mixture;
  dense_first.shape.moe_dense_layers = 3;
  Config dense_block = mixture;
  dense_block.shape = model::block_shape(dense_first.shape, 0);
  REQUIRE(dense_block.shape.mlp == "swiglu");
  const auto compute = [](const BlockTimes& t) {
    return t.forward.on[static_cast<std::size_t>(Stream::compute)] +
           t.backward.on[static_cast<std::size_t>(Stream::compute)];
  };
  const double difference = compute(block_times(dense_block, m, Spans{})) - compute(block_times(mixture, m, Spans{}));
  REQUIRE(difference > 0);
  const StepSimulation a = simulate_step(mixture, m), b = simulate_step(dense_first, m);
  CHECK(b.average.compute - a.average.compute == Approx(4 * 3 * difference).epsilon(1e-9));
  mixture.pipeline = dense_first.pipeline = 2;
  const StepSimulation two_a = simulate_step(mixture, m), two_b = simulate_step(dense_first, m);
  REQUIRE(two_a.stages.size() == 2);
  CHECK(two_b.stages[0].compute - two_a.stages[0].compute == Approx(4 * 3 * difference).epsilon(1e-9));
  CHECK(two_b.stages[1].compute == Approx(two_a.stages[1].compute).epsilon(1e-12));
}

TEST_CASE("step simulation: every all-to-all waits for the busiest expert rank's rows", "[plan][simulation]") {
  // 2 of 8 experts of f = 1024 per token, the experts split over an expert group of 2 (data 2): at
  // an imbalance of 1.5 the busiest rank's experts compute half as many rows again as a balanced
  // rank's. The others wait for that half of the experts' GEMMs on the expert stream, forward
  // 2·R·(2f·h + h·f) FLOPs (R = N·K copies; gate|up, down), backward twice that; their compute
  // stream is the balanced one.
  const Machine m = compute_only();
  Config balanced = mixture_stages(1, 1, 4);
  balanced.data = 2;
  balanced.global_batch = 8;
  balanced.shape.expert = 2;
  Config busiest = balanced;
  busiest.expert_imbalance = 1.5;
  const auto on = [](const Pass& p, Stream s) { return p.on[static_cast<std::size_t>(s)]; };
  const BlockTimes a = block_times(balanced, m, Spans{}), b = block_times(busiest, m, Spans{});
  CHECK(on(b.forward, Stream::compute) == Approx(on(a.forward, Stream::compute)).epsilon(1e-12));
  CHECK(on(b.backward, Stream::compute) == Approx(on(a.backward, Stream::compute)).epsilon(1e-12));
  const double R = 512.0 * 2, h = 1024, f = 1024;
  const double forward = 2.0 * R * (2 * f * h + h * f) / (peak_flops(m, "bf16") * m.max_efficiency);
  CHECK(on(b.forward, Stream::expert) - on(a.forward, Stream::expert) == Approx(0.5 * forward).epsilon(1e-9));
  CHECK(on(b.backward, Stream::expert) - on(a.backward, Stream::expert) == Approx(0.5 * 2 * forward).epsilon(1e-9));
  // The step waits for it in each of the 8 blocks' forward and backward, for each of the 4
  // micro-batches: exposed expert communication.
  const StepSimulation sa = simulate_step(balanced, m), sb = simulate_step(busiest, m);
  CHECK(sb.step_seconds - sa.step_seconds == Approx(4 * 8 * 1.5 * forward).epsilon(1e-6));
  CHECK(sb.average.expert - sa.average.expert == Approx(4 * 8 * 1.5 * forward).epsilon(1e-6));
  CHECK(sb.average.compute == Approx(sa.average.compute).epsilon(1e-12));
  // The 2 ranks sharing one core (rank_time_share 0.5): in the wait only the busiest computes, on
  // the whole core, so the wait takes half as long; the rest of the step, both computing at the
  // file's shared rates, is unchanged.
  Machine one_core = m;
  one_core.devices = 2;
  one_core.rank_time_share = 0.5;
  const StepSimulation shared = simulate_step(busiest, one_core);
  CHECK(sb.step_seconds - shared.step_seconds == Approx(0.5 * 4 * 8 * 1.5 * forward).epsilon(1e-6));
  CHECK(simulate_step(balanced, one_core).step_seconds == Approx(sa.step_seconds).epsilon(1e-9));
  // Without expert parallelism one rank computes every copy: no group to wait for.
  balanced.shape.expert = busiest.shape.expert = 1;
  CHECK(simulate_step(busiest, m).step_seconds == Approx(simulate_step(balanced, m).step_seconds).epsilon(1e-12));
}

TEST_CASE("step simulation: an overlapped bucket costs only its exposed tail", "[plan][simulation]") {
  // One stage of 2 blocks, data 2, one micro-batch: the backward is [head][block 1][block 0]
  // [embedding] of H, B, B, E seconds. Block 1's bucket (R seconds to all-reduce) launches after
  // H + B, block 0's after H + 2B, the embedding's (Re) after H + 2B + E. With E < R < B block 1's
  // reduction hides behind block 0's backward, block 0's runs past the embedding's backward by
  // R − E, and the embedding's follows: the exposed tail is R − E + Re, not the 2R + Re of
  // reductions after the backward.
  Config c = even_stages(1, 1, 2);
  c.shape.layers = 2;
  c.data = 2;
  Machine m = dgx_a100_80gb();  // the real links: the reductions take time
  m.kernel_overhead_us = 0;
  const StepSimulation s = simulate_step(c, m);
  Spans spans;
  spans.data = GroupSpan{2, 1, 2};
  spans.tensor = spans.context = spans.expert = spans.expert_data = spans.embedding = GroupSpan{};
  const BlockTimes t = block_times(c, m, spans);
  const double R = all_reduce_seconds(m, spans.data, t.block_gradient_bytes);
  const double Re = all_reduce_seconds(m, spans.data, 4.0 * c.shape.local_vocab() * c.shape.hidden);
  const double B = t.backward.seconds, E = t.embedding_backward.seconds;
  REQUIRE(E < R);
  REQUIRE(R < B);
  CHECK(s.average.data == Approx(R - E + Re).epsilon(1e-9));

  // A host that drives its collectives (MPI without a progress thread) hides none of them: the
  // data time is the four buckets' 2R + 2Re (the head's lm_head bucket, as large as the
  // embedding's, hid behind block 1's backward), the step grows by that less the R − E + Re the
  // overlap exposed.
  m.communication_host_share = 1;
  const StepSimulation driven = simulate_step(c, m);
  CHECK(driven.average.data == Approx(2 * R + 2 * Re).epsilon(1e-9));
  CHECK(driven.step_seconds - s.step_seconds == Approx(2 * R + 2 * Re - (R - E + Re)).epsilon(1e-9));
  CHECK(driven.average.compute == Approx(s.average.compute).epsilon(1e-12));
}

TEST_CASE("step simulation: the optimizer's gathers beside the next step's first forward", "[plan][simulation]") {
  // One stage of 8 blocks, data 2, the distributed optimizer, one micro-batch, on a machine whose
  // only slow part is the node's link: each block's bf16 gather takes G, longer than its forward F.
  // Gathered after the optimizer (tptrain's way) the step waits for all of them (the updates beside
  // them cost nothing here). With Megatron-Core's --overlap-param-gather every gather is started
  // with the step and block l's forward waits until its gather ends at lG: the first forward is
  // 8G long instead of 8F, and the overlap hides 7F of the gathers (and the embedding's forward
  // and the final norm's gather, 0.2 % of that: the vocabulary is 8 rows).
  Config c = even_stages(1, 1, 1);
  c.data = 2;
  c.global_batch = 2;
  c.distributed_optimizer = true;
  Machine m = compute_only();
  m.link_bandwidth_gbs = 10;
  const StepSimulation after = simulate_step(c, m);
  c.overlap_parameter_gather = true;
  const StepSimulation beside = simulate_step(c, m);
  Spans spans;
  spans.data = spans.shard = GroupSpan{2, 1, 2};
  const BlockTimes t = block_times(c, m, spans);
  REQUIRE(all_gather_seconds(m, spans.shard, t.block_gradient_bytes / 2) > t.forward.seconds);  // bf16 weights
  CHECK(after.step_seconds - beside.step_seconds == Approx(7 * t.forward.seconds).epsilon(0.003));
  CHECK(after.average.data - beside.average.data == Approx(7 * t.forward.seconds).epsilon(0.003));
  CHECK(beside.average.compute == Approx(after.average.compute).epsilon(1e-12));
}

// Hybrid sharding over 2 nodes of 8: the shard group is a node. Sharded parameters' gathers then
// stay on a node's links, so the data-parallel time the step waits for shrinks; with the other
// modes a small model's reductions are latency-bound and the shards' all-reduce across the groups
// adds a collective: the time changes, both ways possible.
TEST_CASE("step simulation: hybrid shard groups time their collectives inside a node and across",
          "[plan][simulation]") {
  Config c = even_stages(1, 1, 16);
  c.data = 16;
  Machine m = dgx_a100_80gb();
  for (const char* mode : {"optimizer", "gradients", "parameters"}) {
    INFO(mode);
    c.set_shard(mode);
    c.shard_group = 0;
    const StepSimulation whole = simulate_step(c, m);
    c.shard_group = 8;
    const StepSimulation hybrid = simulate_step(c, m);
    CHECK(hybrid.average.data > 0);
    CHECK(hybrid.average.data != Approx(whole.average.data).epsilon(1e-6));
    if (std::string(mode) == "parameters") CHECK(hybrid.average.data < whole.average.data);
  }
}

TEST_CASE("step simulation: ring attention's steps run their chunk pairs at the chunk length's efficiency",
          "[plan][simulation]") {
  // Context 2, sequence 512: chunk pairs of c = 128 queries and keys. The first step (the rank's
  // own block) computes two causal diagonals, each a whole 128 x 128 square to flash (its query
  // blocks are 256 rows), and one whole pair: 3c² scores; the later step two whole pairs, 2c².
  // Forward, 4d FLOPs per score and head (Q Kᵀ, P V): at the efficiency measured at length 128,
  // not at the sequence's 512.
  Config c = even_stages(1, 1, 1);
  c.shape.flash_attention = true;
  c.shape.context = 2;
  Machine m = compute_only();
  m.measured_attention = {{"bf16", 512, 0.5, ""}, {"bf16", 128, 0.25, ""}};
  Spans spans;
  spans.context = GroupSpan{2, 1, 2};
  const BlockTimes t = block_times(c, m, spans);
  std::vector<double> steps;
  for (const Kernel& k : t.forward.kernels)
    if (std::string(k.name) == "attention (ring step)") steps.push_back(k.seconds);
  REQUIRE(steps.size() == 2);
  const double d = c.shape.head_dim(), heads = c.shape.heads, pair = 128.0 * 128.0;
  const double rate = m.peak_tflops_bf16 * 1e12 * 0.25;
  CHECK(steps[0] == Approx(4 * d * heads * 3 * pair / rate).epsilon(1e-12));
  CHECK(steps[1] == Approx(4 * d * heads * 2 * pair / rate).epsilon(1e-12));

  // The transfer of the other block's K and V (256 rows of 16 KV heads of 64, K and V in bf16)
  // at 10 GB/s: the first step hides part of it; a host that drives it (communication_host_share
  // 1) waits for all of it.
  m.link_bandwidth_gbs = 10;
  const auto context_time = [&](const Pass& p) { return p.on[static_cast<std::size_t>(Stream::context)]; };
  const double transfer = 2.0 * 256 * c.shape.kv_heads * c.shape.head_dim() * 2 / 10e9;
  CHECK(context_time(block_times(c, m, spans).forward) == Approx(transfer - steps[0]).epsilon(1e-9));
  m.communication_host_share = 1;
  CHECK(context_time(block_times(c, m, spans).forward) == Approx(transfer).epsilon(1e-9));
}

TEST_CASE("step simulation: Megatron-Core's selective recomputation runs the attention core again",
          "[plan][simulation]") {
  // Its checkpoint_core_attention wraps the whole core (flash included): the backward of a block
  // is longer than tptrain's by one forward of the core, and the same without recomputation.
  Config c = even_stages(1, 1, 1);
  c.shape.flash_attention = true;
  const Machine m = compute_only();
  const auto seconds = [&](const Pass& p, const char* name) {
    double t = 0;
    for (const Kernel& k : p.kernels)
      if (std::string(k.name) == name) t += k.seconds;
    return t;
  };
  for (const Recompute r : {Recompute::selective, Recompute::none}) {
    c.recompute = r;
    c.kernels = Config::Kernels::tptrain;
    const BlockTimes ours = block_times(c, m, Spans{});
    c.kernels = Config::Kernels::megatron_core;
    const BlockTimes megatron = block_times(c, m, Spans{});
    const double core = seconds(ours.forward, "attention");
    REQUIRE(core > 0);
    CHECK(seconds(ours.backward, "attention") == 0);
    CHECK(seconds(megatron.backward, "attention") == Approx(r == Recompute::selective ? core : 0.0));
    CHECK(megatron.backward.seconds - ours.backward.seconds ==
          Approx(r == Recompute::selective ? core : 0.0).margin(1e-6 * ours.backward.seconds));
  }
}

TEST_CASE("layout search: each layout's own memory, and the pruned ranking is the full one", "[plan][simulation]") {
  // 8 blocks on 8 GPUs of a DGX A100 (one node): tensor, pipeline, virtual stages, micro-batch,
  // recomputation, both rank orders and the three shard modes. The search computes a layout's
  // memory once for both orders; each kept layout's bytes must be its own most loaded rank's.
  Config deck = even_stages(1, 1, 16);
  deck.data = 8;
  const Machine m = dgx_a100_80gb();
  const SearchResult all = search_layouts(deck, m, 8, std::numeric_limits<std::size_t>::max());
  REQUIRE(all.best.size() == all.fitting);
  REQUIRE(all.simulated == all.fitting);
  std::set<std::pair<int, int>> orders;  // (pipeline > 1, order) of the layouts found
  for (const RankedLayout& l : all.best) {
    CHECK(l.bytes == most_loaded_rank(l.config).total());
    orders.insert({l.config.pipeline > 1, int(l.config.order)});
  }
  CHECK(orders.count({1, int(parallel::RankOrder::tp_pp_dp)}) == 1);
  CHECK(orders.count({1, int(parallel::RankOrder::tp_dp_pp)}) == 1);
  // Bounded by compute_lower_bound, the search of the fastest 5 simulates fewer and ranks the same.
  const SearchResult five = search_layouts(deck, m, 8, 5);
  CHECK(five.simulated < all.simulated);
  REQUIRE(five.best.size() == 5);
  for (std::size_t i = 0; i < 5; ++i) {
    CHECK(five.best[i].sets == all.best[i].sets);
    CHECK(five.best[i].simulation.step_seconds == all.best[i].simulation.step_seconds);
  }
}

TEST_CASE("collectives: a ring all-reduce sends 2(p - 1)/p of the buffer per rank", "[plan][simulation]") {
  CHECK(ring_all_reduce_bytes(1000, 4) == Approx(1500));
  CHECK(ring_all_reduce_bytes(1000, 8) == Approx(1750));
  CHECK(ring_all_reduce_bytes(1000, 1) == 0);
  Machine m = dgx_a100_80gb();
  m.link_latency_us = 0;
  // 8 ranks of one node at 300 GB/s: 1.75 GB in 1.75/300 s.
  CHECK(ring_all_reduce_seconds(m, GroupSpan{8, 1, 8}, 1e9) == Approx(1.75 / 300));
  // 8 ranks, one per node, 25 GB/s NICs: 1.75/25 s plus 14 network latencies.
  m.network_latency_us = 5;
  CHECK(ring_all_reduce_seconds(m, GroupSpan{8, 8, 1}, 1e9) == Approx(1.75 / 25 + 14 * 5e-6));
  // A tiny buffer over many nodes: the tree's 2·log2(64) latencies beat the ring's 2·63.
  CHECK(all_reduce_seconds(m, GroupSpan{64, 64, 1}, 8) == Approx(tree_all_reduce_seconds(m, GroupSpan{64, 64, 1}, 8)));
  CHECK(tree_all_reduce_seconds(m, GroupSpan{64, 64, 1}, 8) < ring_all_reduce_seconds(m, GroupSpan{64, 64, 1}, 8));
  // The library's bus bandwidth (collective_bandwidth_gbs) times a node's collectives; point to
  // point keeps the link's.
  m.collective_bandwidth_gbs = 100;
  CHECK(ring_all_reduce_seconds(m, GroupSpan{8, 1, 8}, 1e9) == Approx(1.75 / 100));
  CHECK(all_gather_seconds(m, GroupSpan{8, 1, 8}, 1e9) == Approx(0.875 / 100 + 7 * m.link_latency_us * 1e-6));
  CHECK(point_to_point_seconds(m, false, 1e9) == Approx(1.0 / 300));
  // A group's span on nodes of 8: its members, their nodes, the most on one node, whatever the
  // members' order (a rank order lists a data group's ranks strided, not sorted).
  const auto same = [](const GroupSpan& a, const GroupSpan& b) {
    return a.members == b.members && a.nodes == b.nodes && a.most_on_a_node == b.most_on_a_node;
  };
  CHECK(same(span_of({0, 1, 2, 3}, 8), GroupSpan{4, 1, 4}));
  CHECK(same(span_of({0, 8, 16, 24}, 8), GroupSpan{4, 4, 1}));
  CHECK(same(span_of({17, 3, 9, 1, 16, 2}, 8), GroupSpan{6, 3, 3}));  // node 0: 3, node 1: 1, node 2: 2
  CHECK(same(span_of({}, 8), GroupSpan{1, 1, 1}));
}

TEST_CASE("GEMM model: tile and wave quantisation, the measured shape's correction", "[plan][simulation]") {
  Machine m = dgx_a100_80gb();  // 108 SMs, tiles 128 x 256, max 0.80
  // 108 tiles of 128 x 256: one full wave.
  CHECK(gemm_efficiency(m, "bf16", GemmShape{128 * 12, 256 * 9, 4096}) == Approx(0.80));
  // 109 tiles: two waves, 109/216 of them used.
  CHECK(gemm_efficiency(m, "bf16", GemmShape{128 * 109, 256, 4096}) == Approx(0.80 * 109.0 / 216));
  // Half a tile's rows: half of it padding.
  CHECK(gemm_efficiency(m, "bf16", GemmShape{64, 256, 4096}) == Approx(0.80 * 0.5 / 108));
  // A measured row: its shape is predicted as measured, others scaled by measured / modelled.
  m.measured.push_back(io::MeasuredGemm{"bf16", 128 * 12, 256 * 9, 4096, 0.60, ""});
  CHECK(gemm_efficiency(m, "bf16", GemmShape{128 * 12, 256 * 9, 4096}) == Approx(0.60));
  CHECK(gemm_efficiency(m, "bf16", GemmShape{128 * 109, 256, 4096}) == Approx(0.60 * 109.0 / 216));
  CHECK(gemm_efficiency(m, "fp32", GemmShape{128 * 12, 256 * 9, 4096}) == Approx(0.80));  // no fp32 row
  // The roofline: a GEMM of k = 1 moves more bytes than it computes.
  const double t = gemm_seconds(m, "bf16", GemmShape{8192, 8192, 1}, 2);
  CHECK(t == Approx((8192.0 * 8192 + 2 * 8192) * 2 / 2039e9));
}

TEST_CASE("step simulation: the trace shows every rank, each of a stage on its stage's timeline", "[plan][simulation]") {
  // tensor 2 x pipeline 2 x data 2 = 8 ranks: every one has spans, on every stream's track, and
  // the ranks of a stage have the same spans (they run the same ops at the same times).
  Config c = even_stages(2, 1, 4);
  c.shape.tensor = 2;
  c.data = 2;
  c.global_batch = 8;
  io::ChromeTrace trace;
  simulate_step(c, compute_only(), &trace);
  std::map<int, std::vector<std::pair<double, std::string>>> by_rank;
  for (const io::TraceSpan& s : trace.spans()) by_rank[s.rank].push_back({s.start_us, s.name});
  REQUIRE(by_rank.size() == 8);
  for (int r = 0; r < 8; ++r) CHECK(by_rank.count(r) == 1);
  // Under tp-pp-dp, ranks 0, 1 (tensor) and 4, 5 (data) are stage 0's; 2, 3, 6, 7 stage 1's.
  CHECK(by_rank[1] == by_rank[0]);
  CHECK(by_rank[4] == by_rank[0]);
  CHECK(by_rank[5] == by_rank[0]);
  CHECK(by_rank[3] == by_rank[2]);
  CHECK(by_rank[7] == by_rank[2]);
  CHECK(by_rank[2] != by_rank[0]);
  CHECK(trace_note(c).empty());
  // Beyond kTraceEveryRankUpTo ranks: one rank per stage, and a note saying so.
  c.data = 1024;
  c.global_batch = 4096;
  io::ChromeTrace big;
  simulate_step(c, compute_only(), &big);
  std::set<int> ranks;
  for (const io::TraceSpan& s : big.spans()) ranks.insert(s.rank);
  CHECK(ranks.size() == 2);
  CHECK(trace_note(c).find("one rank per pipeline stage") != std::string::npos);
}
