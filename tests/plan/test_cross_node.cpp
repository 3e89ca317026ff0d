// Bytes across node boundaries (src/plan/cross_node.hpp): the floor sum against its definition,
// the ring and chain crossings of a lattice of groups (and of groups made of blocks) against the
// groups enumerated one by one, and the bytes of each group under each rank order against the
// groups the rank map builds (src/parallel/topology_rank_map.hpp; with context parallelism the
// context rings and the data x context groups), on every small layout and node size.
#include "catch.hpp"

#include <chrono>
#include <cstdint>
#include <array>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "src/parallel/topology_rank_map.hpp"
#include "src/plan/cross_node.hpp"
#include "src/plan/plan.hpp"

using namespace tptrain;
using namespace tptrain::plan;
using parallel::RankOrder;

namespace {

// A ring visits each node of its group once: a group on n > 1 nodes sends n times across.
std::int64_t ring_of(const std::vector<std::int64_t>& members, std::int64_t g) {
  std::set<std::int64_t> nodes;
  for (const std::int64_t r : members) nodes.insert(r / g);
  return nodes.size() > 1 ? std::int64_t(nodes.size()) : 0;
}

std::int64_t chain_of(const std::vector<std::int64_t>& members, std::int64_t g) {
  std::int64_t n = 0;
  for (std::size_t j = 1; j < members.size(); ++j) n += members[j] / g != members[j - 1] / g;
  return n;
}

// Ring attention's point-to-point ring: member j sends to member j + 1 mod C.
std::int64_t p2p_ring_of(const std::vector<std::int64_t>& members, std::int64_t g) {
  if (members.size() < 2) return 0;
  std::int64_t n = 0;
  for (std::size_t j = 0; j < members.size(); ++j) n += members[j] / g != members[(j + 1) % members.size()] / g;
  return n;
}

// Every group of a lattice, its members in order; with `blocks` blocks `block_stride` apart.
std::vector<std::vector<std::int64_t>> groups_of(const GroupLattice& l, std::int64_t block_stride = 0,
                                                 std::int64_t blocks = 1) {
  std::vector<std::vector<std::int64_t>> out;
  for (std::int64_t u = 0; u < l.n1; ++u)
    for (std::int64_t i = 0; i < l.n2; ++i)
      for (std::int64_t w = 0; w < l.n3; ++w) {
        std::vector<std::int64_t> members;
        for (std::int64_t k = 0; k < blocks; ++k)
          for (std::int64_t j = 0; j < l.members; ++j)
            members.push_back(l.base + l.e1 * u + l.e2 * i + l.e3 * w + j * l.stride + k * block_stride);
        out.push_back(members);
      }
  return out;
}

Config small_config(int T, int P, int D, bool sp = false, bool distributed = false, int C = 1) {
  Config c;
  c.shape.layers = 12;
  c.shape.hidden = 48;
  c.shape.heads = 12;
  c.shape.ffn_hidden = 96;
  c.shape.seq_length = 24;
  c.shape.vocab_size = 250;
  c.shape.tensor = T;
  c.shape.context = C;  // 24 tokens: 2·C chunks for C = 1, 2, 3, 4
  c.pipeline = P;
  c.data = D;
  c.global_batch = 2 * 4 * D;
  c.micro_batch = 2;
  c.precision = "bf16";
  c.sequence_parallel = sp;
  c.distributed_optimizer = distributed;
  return c;
}

// The bytes across nodes, rank by rank from the rank map: every group by its coordinates, its
// crossings times what a rank of its stage sends (src/plan/communication.hpp).
CrossNodeBytes brute_force(const Config& c, RankOrder order, std::int64_t g) {
  const parallel::Layout L{c.tensor(), c.pipeline, c.data, order, c.context()};
  const StageParameters sp = stage_parameters(c.shape, c.pipeline);
  const int T = c.tensor(), C = c.context(), P = c.pipeline, D = c.data;
  const auto rank = [&](int tp, int cp, int pp, int dp) {
    return std::int64_t(parallel::world_rank_of({tp, pp, dp, cp}, L));
  };
  // Each group's members in the group's order, keyed by the stage first where the bytes depend on it.
  std::map<std::array<int, 3>, std::vector<std::int64_t>> tensor, context, data, pipeline, embedding;
  for (int tp = 0; tp < T; ++tp)
    for (int cp = 0; cp < C; ++cp)
      for (int pp = 0; pp < P; ++pp)
        for (int dp = 0; dp < D; ++dp) {
          tensor[{pp, cp, dp}];
          for (int k = 0; tp == 0 && k < T; ++k) tensor[{pp, cp, dp}].push_back(rank(k, cp, pp, dp));
          for (int k = 0; cp == 0 && k < C; ++k) context[{pp, tp, dp}].push_back(rank(tp, k, pp, dp));
          // The data x context group of (tp, pp), in the order cp + C·dp (src/parallel/topology.cpp).
          for (int k = 0; cp == 0 && dp == 0 && k < C * D; ++k) data[{pp, tp, 0}].push_back(rank(tp, k % C, pp, k / C));
          for (int k = 0; pp == 0 && k < P; ++k) pipeline[{tp, cp, dp}].push_back(rank(tp, cp, k, dp));
          if (pp == 0 && P > 1) embedding[{tp, cp, dp}] = {rank(tp, cp, 0, dp), rank(tp, cp, P - 1, dp)};
        }
  CrossNodeBytes out;
  out.order = order;
  const auto per_rank = [&](int stage) { return stage_communication(c, stage, sp.of(stage)); };
  for (const auto& [key, members] : tensor) out.tensor += double(ring_of(members, g)) * per_rank(key[0]).tensor;
  for (const auto& [key, members] : context)
    out.context += double(p2p_ring_of(members, g)) * per_rank(key[0]).context;
  for (const auto& [key, members] : data) out.data += double(ring_of(members, g)) * per_rank(key[0]).data;
  // Interleaved 1F1B: virtual stage k lives on stage k mod P, and each virtual stage hands its
  // output to the next (the chain of P·v virtual stages visits the P ranks v times).
  for (const auto& [key, members] : pipeline) {
    std::vector<std::int64_t> virtual_chain;
    for (int k = 0; k < P * c.virtual_stages; ++k) virtual_chain.push_back(members[std::size_t(k % P)]);
    out.pipeline += double(chain_of(virtual_chain, g)) * pipeline_link_bytes(c);
  }
  for (const auto& [key, members] : embedding) out.embedding += double(ring_of(members, g)) * per_rank(0).embedding;
  return out;
}

void check_equal(const CrossNodeBytes& got, const CrossNodeBytes& want) {
  CHECK(got.tensor == Approx(want.tensor).epsilon(1e-12));
  CHECK(got.context == Approx(want.context).epsilon(1e-12));
  CHECK(got.pipeline == Approx(want.pipeline).epsilon(1e-12));
  CHECK(got.data == Approx(want.data).epsilon(1e-12));
  CHECK(got.embedding == Approx(want.embedding).epsilon(1e-12));
}

}  // namespace

TEST_CASE("cross-node: the floor sum is its definition", "[plan][cross_node]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::int64_t n = rng() % 60, m = 1 + rng() % 40, a = rng() % 120, b = rng() % 120;
    std::int64_t want = 0;
    for (std::int64_t i = 0; i < n; ++i) want += (a * i + b) / m;
    INFO("n " << n << " m " << m << " a " << a << " b " << b);
    REQUIRE(floor_sum(n, m, a, b).value() == want);
  }
  // Exact at the size of the largest world: Σ_{i<n} i = n(n − 1)/2 for n = 2^31 − 1.
  const std::int64_t n = 2147483647;
  CHECK(floor_sum(n, 1, 1, 0).value() == n * (n - 1) / 2);
  CHECK(floor_sum(n, 8, 1, 7).value() == floor_sum(n, 8, 1, 7).value());
  CHECK_THROWS(floor_sum(-1, 1, 1, 0));
}

TEST_CASE("cross-node: ring and chain crossings of a lattice equal its groups one by one", "[plan][cross_node]") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 4000; ++trial) {
    GroupLattice l;
    l.base = rng() % 20;
    l.e1 = rng() % 25;
    l.n1 = rng() % 6;
    l.e2 = rng() % 25;
    l.n2 = rng() % 6;
    l.stride = 1 + rng() % 15;
    l.members = 1 + rng() % 6;
    if (trial % 2 == 1) {  // a third axis; one that continues another half the time
      l.n3 = rng() % 5;
      l.e3 = trial % 4 == 1 ? l.e1 * l.n1 : rng() % 40;
    }
    const std::int64_t g = 1 + rng() % 24;
    std::int64_t ring = 0, chain = 0;
    for (const auto& members : groups_of(l)) {
      ring += ring_of(members, g);
      chain += chain_of(members, g);
    }
    INFO("base " << l.base << " e1 " << l.e1 << " n1 " << l.n1 << " e2 " << l.e2 << " n2 " << l.n2 << " e3 " << l.e3
                 << " n3 " << l.n3 << " stride " << l.stride << " members " << l.members << ", " << g
                 << " GPUs per node");
    REQUIRE(ring_crossings(l, g).value() == ring);
    REQUIRE(chain_crossings(l, g).value() == chain);
  }
}

TEST_CASE("cross-node: rings of groups made of blocks equal their groups one by one", "[plan][cross_node]") {
  // The data x context groups under tp-cp-pp-dp: blocks of C members T apart, D blocks T·C·P apart.
  std::mt19937 rng(13);
  for (int trial = 0; trial < 4000; ++trial) {
    GroupLattice l;
    l.base = rng() % 20;
    l.e1 = rng() % 25;
    l.n1 = rng() % 5;
    l.e2 = rng() % 25;
    l.n2 = rng() % 5;
    l.stride = 1 + rng() % 10;
    l.members = 1 + rng() % 5;
    const std::int64_t blocks = rng() % 5;
    // Blocks in order: the next starts after the last member; evenly spaced a quarter of the time.
    const std::int64_t block_stride =
        trial % 4 == 0 ? l.stride * l.members : (l.members - 1) * l.stride + 1 + std::int64_t(rng() % 30);
    const std::int64_t g = 1 + rng() % 24;
    std::int64_t ring = 0;
    for (const auto& members : groups_of(l, block_stride, blocks)) ring += ring_of(members, g);
    INFO("base " << l.base << " e1 " << l.e1 << " n1 " << l.n1 << " e2 " << l.e2 << " n2 " << l.n2 << " stride "
                 << l.stride << " members " << l.members << ", " << blocks << " blocks " << block_stride
                 << " apart, " << g << " GPUs per node");
    REQUIRE(blocked_ring_crossings(l, block_stride, blocks, g).value() == ring);
  }
}

TEST_CASE("cross-node: every small layout, order and node size against the rank map's groups",
          "[plan][cross_node]") {
  for (const RankOrder order : {RankOrder::tp_pp_dp, RankOrder::tp_dp_pp})
    for (const int C : {1, 2, 3})
      for (const int T : {1, 2, 3, 4})
        for (const int P : {1, 2, 3, 4})
          for (const int D : {1, 2, 3, 5})
            for (const bool sp : {false, true})
              for (const int v : {1, 2, 3}) {
                if (v > 1 && P == 1) continue;
                if (C > 1 && v == 3) continue;  // bounded time: v = 2 shows the chunks
                Config c = small_config(T, P, D, sp, D > 1 && sp, C);
                c.virtual_stages = v;
                const std::int64_t world = c.world();
                for (std::int64_t g = 1; g <= world + 1; ++g) {
                  INFO("tensor " << T << " context " << C << " pipeline " << P << " data " << D << ", virtual stages "
                                 << v << ", order " << parallel::rank_order_name(order) << ", " << g
                                 << " GPUs per node");
                  check_equal(cross_node_bytes(c, stage_parameters(c.shape, P), order, g), brute_force(c, order, g));
                }
              }
}

TEST_CASE("cross-node: tensor 2 x context 2 x pipeline 2 x data 2 on nodes of 4, by hand", "[plan][cross_node]") {
  const Config c = small_config(2, 2, 2, false, false, 2);
  const StageParameters sp = stage_parameters(c.shape, 2);
  const StepCommunication first = stage_communication(c, 0, sp.of(0)), last = stage_communication(c, 1, sp.of(1));
  CHECK(first.context > 0);
  CHECK(first.context == last.context);
  // tp-cp-pp-dp: node = (pp, dp), a node holds one tensor x context block. The context rings
  // {x, x + 2} stay inside; each data x context group {x, x + 2, x + 8, x + 10} spans two nodes.
  const CrossNodeBytes a = cross_node_bytes(c, sp, RankOrder::tp_pp_dp, 4);
  CHECK(a.tensor == 0);
  CHECK(a.context == 0);
  CHECK(a.data == Approx(2 * 2 * first.data + 2 * 2 * last.data));
  CHECK(a.pipeline == Approx(8 * pipeline_link_bytes(c)));  // 8 pipeline groups {x, x + 4}, one crossing each
  // Nodes of 2: a node is a tensor group; every context ring {x, x + 2} crosses twice (there and
  // back), 8 of them.
  const CrossNodeBytes b = cross_node_bytes(c, sp, RankOrder::tp_pp_dp, 2);
  CHECK(b.tensor == 0);
  CHECK(b.context == Approx(8 * 2 * first.context));
  // tp-cp-dp-pp: the data x context group {x, x + 2, x + 4, x + 6} is one node of 8; a
  // pipeline pair {x, x + 8} crosses.
  const CrossNodeBytes m = cross_node_bytes(c, sp, RankOrder::tp_dp_pp, 8);
  CHECK(m.data == 0);
  CHECK(m.context == 0);
  CHECK(m.pipeline == Approx(8 * pipeline_link_bytes(c)));
}

TEST_CASE("cross-node: tensor 4 x pipeline 2 x data 2 on two nodes of 8, by hand", "[plan][cross_node]") {
  const Config c = small_config(4, 2, 2);
  const StageParameters sp = stage_parameters(c.shape, 2);
  const StepCommunication first = stage_communication(c, 0, sp.of(0)), last = stage_communication(c, 1, sp.of(1));
  // tp-pp-dp: node = dp. Each data group {x, x + 8} spans both nodes (2 ring edges), 4 of each stage;
  // the pipeline and embedding groups {x, x + 4} stay in their node.
  const CrossNodeBytes a = cross_node_bytes(c, sp, RankOrder::tp_pp_dp, 8);
  CHECK(a.tensor == 0);
  CHECK(a.pipeline == 0);
  CHECK(a.embedding == 0);
  CHECK(a.data == Approx(4 * 2 * first.data + 4 * 2 * last.data));
  // tp-dp-pp: node = pp. The data groups {x, x + 4} stay in a node; the 8 pipeline groups
  // {x, x + 8} cross once each, their embedding groups (the same pairs) twice.
  const CrossNodeBytes b = cross_node_bytes(c, sp, RankOrder::tp_dp_pp, 8);
  CHECK(b.tensor == 0);
  CHECK(b.data == 0);
  CHECK(b.pipeline == Approx(8 * pipeline_link_bytes(c)));
  CHECK(b.embedding == Approx(8 * 2 * first.embedding));
  CHECK(first.embedding > 0);
}

TEST_CASE("cross-node: a world of 2^31 - 8 ranks on nodes of 4 takes no time", "[plan][cross_node]") {
  // tp-pp-dp with T·P = 12 a multiple of 4: each replica fills 3 nodes alike, so the tensor and
  // pipeline bytes grow with D exactly; the data groups (stride 12) cross at every member.
  const Config small = small_config(2, 6, 4);
  const Config huge = small_config(2, 6, 178956970);  // 12 · 178956970 = 2^31 − 8
  const auto start = std::chrono::steady_clock::now();
  const CrossNodeBytes h = cross_node_bytes(huge, stage_parameters(huge.shape, 6), RankOrder::tp_pp_dp, 4);
  const CrossNodeBytes hm = cross_node_bytes(huge, stage_parameters(huge.shape, 6), RankOrder::tp_dp_pp, 4);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const CrossNodeBytes s = cross_node_bytes(small, stage_parameters(small.shape, 6), RankOrder::tp_pp_dp, 4);
  check_equal(s, brute_force(small, RankOrder::tp_pp_dp, 4));
  CHECK(h.tensor == Approx(s.tensor * 178956970 / 4).epsilon(1e-12));
  CHECK(h.pipeline == Approx(s.pipeline * 178956970 / 4).epsilon(1e-12));
  CHECK(hm.total() > 0);
  CHECK(seconds < 1.0);
  // The worst shape for the lattice loop: both sides near √(2^31).
  const Config square = small_config(2, 32768, 32767);
  const StageParameters uniform_stages{std::vector<std::int64_t>(32768, 10), std::vector<std::int64_t>(32768, 0), {}};
  const auto t0 = std::chrono::steady_clock::now();
  for (const RankOrder order : {RankOrder::tp_pp_dp, RankOrder::tp_dp_pp})
    for (const std::int64_t g : {3, 8, 1000, 65536})
      CHECK(cross_node_bytes(square, uniform_stages, order, g).total() > 0);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 2.0);
  // With context parallelism: the data x context groups of the middle stages under tp-cp-pp-dp
  // are the one lattice with three sides left (2 x 32766 x 16383 here).
  const Config context = small_config(2, 32768, 16383, false, false, 2);  // 2^31 − 2^17 ranks
  const auto t1 = std::chrono::steady_clock::now();
  for (const RankOrder order : {RankOrder::tp_pp_dp, RankOrder::tp_dp_pp})
    for (const std::int64_t g : {3, 8, 1000, 65536}) {
      const CrossNodeBytes x = cross_node_bytes(context, uniform_stages, order, g);
      CHECK(x.data > 0);
      CHECK(x.context >= 0);
    }
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() < 2.0);
}

TEST_CASE("cross-node: the plan reports both orders and recommends the one that sends less", "[plan][cross_node]") {
  // GPT-3 175B as Narayanan et al. 2021 train it, on 1024 GPUs.
  Config c;
  c.shape.layers = 96;
  c.shape.hidden = 12288;
  c.shape.heads = 96;
  c.shape.ffn_hidden = 4 * 12288;
  c.shape.seq_length = 2048;
  c.shape.vocab_size = 51200;
  c.shape.tensor = 8;
  c.pipeline = 16;
  c.data = 8;
  c.global_batch = 1536;
  c.micro_batch = 1;
  c.precision = "bf16";
  c.recompute = Recompute::full;
  const auto plan_of = [](const Config& config, int gpus_per_node) {
    Hardware hw;
    hw.gpus_per_node = gpus_per_node;
    return make_plan(config, hw, 3e11, "", false);
  };
  const auto check_plan = [](const Plan& p) {
    REQUIRE(p.cross_node.size() == 2);
    CHECK(p.cross_node[0].order == RankOrder::tp_pp_dp);
    CHECK(p.cross_node[1].order == RankOrder::tp_dp_pp);
    const StageParameters sp = stage_parameters(p.config.shape, p.config.pipeline);
    for (const CrossNodeBytes& x : p.cross_node)
      check_equal(x, cross_node_bytes(p.config, sp, x.order, p.hardware.gpus_per_node));
    const double deck = p.cross_node[p.config.order == RankOrder::tp_pp_dp ? 0 : 1].total();
    const double chosen = p.cross_node[p.recommended_order == RankOrder::tp_pp_dp ? 0 : 1].total();
    CHECK(chosen <= deck);
    if (chosen == deck) CHECK(p.recommended_order == p.config.order);  // a tie keeps the deck's
  };
  // Tensor 8 on nodes of 8: a node is one tensor group in either order, so both send the same.
  const Plan same = plan_of(c, 8);
  check_plan(same);
  CHECK(same.cross_node[0].total() == same.cross_node[1].total());
  CHECK(same.cross_node[0].tensor == 0);
  CHECK(same.recommended_order == RankOrder::tp_pp_dp);
  // Tensor 4, data 16: Megatron's order halves the data-parallel rings' crossings, worth more than
  // the stage-to-stage transfers the default keeps inside a node.
  Config t4 = c;
  t4.shape.tensor = 4;
  t4.data = 16;
  const Plan megatron = plan_of(t4, 8);
  check_plan(megatron);
  CHECK(megatron.recommended_order == RankOrder::tp_dp_pp);
  CHECK(megatron.cross_node[1].data == Approx(megatron.cross_node[0].data / 2));
  // Nodes of 32: four stages of a replica per node under the default order; it wins even when the
  // deck asks for the other.
  Config deck_megatron = c;
  deck_megatron.order = RankOrder::tp_dp_pp;
  const Plan wide = plan_of(deck_megatron, 32);
  check_plan(wide);
  CHECK(wide.recommended_order == RankOrder::tp_pp_dp);
  // The JSON line carries them.
  const std::string json = report_json(megatron);
  CHECK_THAT(json, Catch::Contains("\"order\": \"tp-pp-dp\", \"cross_node_bytes_per_step\": {\"tp-pp-dp\": {\"tensor\": 0, "));
  CHECK_THAT(json, Catch::Contains("\"recommended_order\": \"tp-dp-pp\""));
  CHECK_THAT(report(megatron), Catch::Contains("recommended: --set parallel.order=tp-dp-pp"));
}
