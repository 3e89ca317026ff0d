// Rank grid: coordinates (pure arithmetic, both rank orders) and the communicators of each group
// (under MPI, both orders: every group holds exactly the ranks the map puts in it).
#include <mpi.h>
#include <set>

#include "catch.hpp"
#include "src/parallel/collectives.hpp"
#include "src/parallel/topology.hpp"
#include "src/parallel/topology_of_deck.hpp"
#include "tests/mpi_test_util.hpp"

using namespace tptrain::parallel;

using tptrain::test::world_rank;
using tptrain::test::world_size;

TEST_CASE("coordinates: tensor fastest, then pipeline, then data", "[parallel][topology]") {
  // The worked example of topology.hpp: 16 ranks, TP2 x PP4 x DP2.
  const Layout L{2, 4, 2};
  const Coordinates c5 = coordinates_of(5, L);
  CHECK(c5.tp == 1);
  CHECK(c5.pp == 2);
  CHECK(c5.dp == 0);
  const Coordinates c14 = coordinates_of(14, L);
  CHECK(c14.tp == 0);
  CHECK(c14.pp == 3);
  CHECK(c14.dp == 1);

  // GPT-3 175B layout of the seed article: 8 x 16 x 8 on 1024 GPUs.
  const Layout G{8, 16, 8};
  CHECK(G.world_size() == 1024);
  const Coordinates c = coordinates_of(1023, G);
  CHECK(c.tp == 7);
  CHECK(c.pp == 15);
  CHECK(c.dp == 7);

  for (const Layout& layout : {Layout{1, 1, 1}, Layout{2, 1, 1}, Layout{1, 2, 2}, Layout{2, 4, 2},
                               Layout{4, 1, 3}, Layout{8, 16, 8}}) {
    std::set<int> seen;
    for (int r = 0; r < layout.world_size(); ++r) {
      const Coordinates k = coordinates_of(r, layout);
      REQUIRE(k.tp >= 0);
      REQUIRE(k.tp < layout.tensor);
      REQUIRE(k.pp < layout.pipeline);
      REQUIRE(k.dp < layout.data);
      REQUIRE(world_rank_of(k, layout) == r);
      seen.insert(k.tp + 1000 * k.pp + 1000000 * k.dp);
    }
    CHECK(static_cast<int>(seen.size()) == layout.world_size());
  }
}

TEST_CASE("coordinates, order tp-dp-pp: tensor fastest, then data, then pipeline", "[parallel][topology]") {
  // The second worked example of topology.hpp: 16 ranks, TP2 x PP4 x DP2, Megatron's order.
  const Layout L{2, 4, 2, RankOrder::tp_dp_pp};
  const Coordinates c5 = coordinates_of(5, L);  // 5 = 1 + 2·(0 + 2·1)
  CHECK(c5.tp == 1);
  CHECK(c5.dp == 0);
  CHECK(c5.pp == 1);
  const Coordinates c14 = coordinates_of(14, L);  // 14 = 0 + 2·(1 + 2·3)
  CHECK(c14.tp == 0);
  CHECK(c14.dp == 1);
  CHECK(c14.pp == 3);
  // The groups of the header's example.
  CHECK(world_rank_of({0, 0, 0}, L) == 0);
  CHECK(world_rank_of({0, 1, 0}, L) == 4);
  CHECK(world_rank_of({0, 3, 0}, L) == 12);  // embedding group {0, 12}
  CHECK(world_rank_of({1, 0, 1}, L) == 3);   // DP group {1, 3}

  for (const int T : {1, 2, 3})
    for (const int P : {1, 2, 4})
      for (const int D : {1, 2, 3}) {
        const Layout a{T, P, D, RankOrder::tp_pp_dp}, b{T, P, D, RankOrder::tp_dp_pp};
        INFO("tensor " << T << " pipeline " << P << " data " << D);
        std::set<int> seen;
        bool differ = false;
        for (int r = 0; r < b.world_size(); ++r) {
          const Coordinates k = coordinates_of(r, b);
          REQUIRE(k.tp < T);
          REQUIRE(k.pp < P);
          REQUIRE(k.dp < D);
          REQUIRE(world_rank_of(k, b) == r);
          // Data varies before pipeline: the next replica of a stage is T ranks on.
          CHECK(k.tp + T * (k.dp + D * k.pp) == r);
          seen.insert(world_rank_of(k, a));
          differ = differ || world_rank_of(k, a) != r;
          // The strides step along one axis and leave the others.
          const Strides s = strides_of(b);
          if (k.pp + 1 < P) {
            const Coordinates n = coordinates_of(r + static_cast<int>(s.pipeline), b);
            CHECK((n.tp == k.tp && n.dp == k.dp && n.pp == k.pp + 1));
          }
          if (k.dp + 1 < D) {
            const Coordinates n = coordinates_of(r + static_cast<int>(s.data), b);
            CHECK((n.tp == k.tp && n.pp == k.pp && n.dp == k.dp + 1));
          }
        }
        CHECK(static_cast<int>(seen.size()) == b.world_size());  // a permutation of the ranks
        // The orders name the same map exactly when one of pipeline and data is 1.
        CHECK(differ == (P > 1 && D > 1));
      }
}

TEST_CASE("parallel.order names", "[parallel][topology]") {
  CHECK(rank_order_from_name("tp-pp-dp") == RankOrder::tp_pp_dp);
  CHECK(rank_order_from_name("tp-dp-pp") == RankOrder::tp_dp_pp);
  CHECK(rank_order_name(RankOrder::tp_dp_pp) == "tp-dp-pp");
  CHECK(rank_order_name(Layout{}.order) == "tp-pp-dp");  // the default
  CHECK_THROWS_WITH(rank_order_from_name("dp-tp-pp"), tptrain::test::contains("expected \"tp-pp-dp\" or \"tp-dp-pp\""));
}

TEST_CASE("world size problem names both sizes", "[parallel][topology]") {
  CHECK(world_size_problem(4, Layout{2, 2, 1}).empty());
  const std::string p = world_size_problem(2, Layout{2, 2, 1});
  CHECK_THAT(p, tptrain::test::contains("started 2 ranks"));
  CHECK_THAT(p, tptrain::test::contains("= 4 ranks"));
}

TEST_CASE("a world that does not match the layout throws on every rank", "[parallel][topology][mpi]") {
  const int n = world_size();
  CHECK_THROWS_AS(Topology(MPI_COMM_WORLD, Layout{n + 1, 1, 1}), TopologyError);
  CHECK_THROWS_AS(Topology(MPI_COMM_WORLD, Layout{1, 2 * n, 1}), TopologyError);
  // Everyone is still here and can communicate: nobody hung or left.
  int sum = 1;
  MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(sum == n);
}

// Sum of the world ranks of a group, computed from the rank arithmetic alone.
static long expected_group_sum(const Layout& L, const Coordinates& me, char group) {
  long sum = 0;
  for (int r = 0; r < L.world_size(); ++r) {
    const Coordinates c = coordinates_of(r, L);
    const bool same = group == 't'   ? (c.pp == me.pp && c.dp == me.dp)
                      : group == 'p' ? (c.tp == me.tp && c.dp == me.dp)
                      : group == 'd' ? (c.tp == me.tp && c.pp == me.pp)
                                     : (c.tp == me.tp && c.dp == me.dp &&
                                        (c.pp == 0 || c.pp == L.pipeline - 1));
    if (same) sum += r;
  }
  return sum;
}

TEST_CASE("group communicators hold exactly the ranks of their group", "[parallel][topology][mpi]") {
  const int n = world_size();
  const int me = world_rank();
  for (const RankOrder order : {RankOrder::tp_pp_dp, RankOrder::tp_dp_pp})
  for (int t = 1; t <= n; ++t) {
    for (int p = 1; t * p <= n; ++p) {
      if (n % (t * p) != 0) continue;
      const Layout L{t, p, n / (t * p), order};
      INFO("layout tensor " << t << " pipeline " << p << " data " << L.data << ", order " << rank_order_name(order));
      Topology topo(MPI_COMM_WORLD, L);
      const Coordinates c = topo.coords();
      REQUIRE(topo.world_rank() == me);
      CHECK(world_rank_of(c, L) == me);
      CHECK(topo.tp().size() == t);
      CHECK(topo.tp().rank() == c.tp);
      CHECK(topo.pp().size() == p);
      CHECK(topo.pp().rank() == c.pp);
      CHECK(topo.dp().size() == L.data);
      CHECK(topo.dp().rank() == c.dp);
      CHECK(topo.is_first_stage() == (c.pp == 0));
      CHECK(topo.is_last_stage() == (c.pp == p - 1));
      CHECK(all_reduce_scalar<std::int64_t>(topo.tp(), me, ReduceOp::sum) == expected_group_sum(L, c, 't'));
      CHECK(all_reduce_scalar<std::int64_t>(topo.pp(), me, ReduceOp::sum) == expected_group_sum(L, c, 'p'));
      CHECK(all_reduce_scalar<std::int64_t>(topo.dp(), me, ReduceOp::sum) == expected_group_sum(L, c, 'd'));
      const bool edge = c.pp == 0 || c.pp == p - 1;
      REQUIRE(topo.in_embedding_group() == edge);
      if (edge) {
        CHECK(topo.embedding().size() == (p == 1 ? 1 : 2));
        CHECK(all_reduce_scalar<std::int64_t>(topo.embedding(), me, ReduceOp::sum) ==
              expected_group_sum(L, c, 'e'));
      } else {
        CHECK_THROWS_AS(topo.embedding(), std::logic_error);
      }
      CHECK_THAT(topo.describe(), tptrain::test::contains("tp " + std::to_string(c.tp)));
    }
  }
}

TEST_CASE("coordinates: expert parallelism splits the data coordinate", "[parallel][topology]") {
  // The worked example of topology.hpp: 8 ranks, tensor 2, data 4, expert 2.
  const Layout L{2, 1, 4, RankOrder::tp_pp_dp, 1, 2};
  CHECK(L.world_size() == 8);  // expert parallelism adds no ranks
  const Coordinates c5 = coordinates_of(5, L);  // tp 1, dp 2
  CHECK(c5.dp == 2);
  CHECK(c5.ep == 0);
  CHECK(c5.edp == 1);
  const Coordinates c6 = coordinates_of(6, L);  // tp 0, dp 3
  CHECK(c6.ep == 1);
  CHECK(c6.edp == 1);
  for (const RankOrder order : {RankOrder::tp_pp_dp, RankOrder::tp_dp_pp})
    for (const int E : {1, 2, 3, 6}) {
      const Layout M{2, 2, 6, order, 2, E};
      for (int r = 0; r < M.world_size(); ++r) {
        const Coordinates k = coordinates_of(r, M);
        REQUIRE(k.ep == k.dp % E);
        REQUIRE(k.edp == k.dp / E);
        REQUIRE(world_rank_of(k, M) == r);
      }
    }
  // Without expert parallelism every rank is expert rank 0 and its own expert-data rank.
  const Coordinates d = coordinates_of(7, Layout{2, 1, 4});
  CHECK(d.ep == 0);
  CHECK(d.edp == d.dp);
}

// The world ranks of my group as a bit set (one bit per world rank), from the arithmetic alone:
// 'e' the expert-parallel group (same tp, cp, pp, edp), 'x' the expert-data group (same tp, pp, ep).
static std::int64_t expected_expert_members(const Layout& L, const Coordinates& me, char group) {
  std::int64_t bits = 0;
  for (int r = 0; r < L.world_size(); ++r) {
    const Coordinates c = coordinates_of(r, L);
    const bool same = group == 'e' ? (c.tp == me.tp && c.cp == me.cp && c.pp == me.pp && c.edp == me.edp)
                                   : (c.tp == me.tp && c.pp == me.pp && c.ep == me.ep);
    if (same) bits |= std::int64_t{1} << r;
  }
  return bits;
}

static std::int64_t members(const Communicator& group) {
  return all_reduce_scalar<std::int64_t>(group, std::int64_t{1} << world_rank(), ReduceOp::sum);
}

TEST_CASE("expert groups hold exactly the ranks of their group", "[parallel][topology][mpi]") {
  const int n = world_size();
  REQUIRE(n < 63);
  const int me = world_rank();
  int layouts = 0;
  for (const RankOrder order : {RankOrder::tp_pp_dp, RankOrder::tp_dp_pp})
    for (int t = 1; t <= n; ++t)
      for (int cp = 1; t * cp <= n; ++cp)
        for (int p = 1; t * cp * p <= n; ++p) {
          if (n % (t * cp * p) != 0) continue;
          const int d = n / (t * cp * p);
          for (int e = 1; e <= d; ++e) {
            if (d % e != 0) continue;
            const Layout L{t, p, d, order, cp, e};
            INFO("layout tensor " << t << " context " << cp << " pipeline " << p << " data " << d << " expert " << e
                                  << ", order " << rank_order_name(order));
            Topology topo(MPI_COMM_WORLD, L);
            ++layouts;
            const Coordinates c = topo.coords();
            CHECK(c.ep == c.dp % e);
            CHECK(c.edp == c.dp / e);
            CHECK(topo.ep().size() == e);
            CHECK(topo.ep().rank() == c.ep);
            CHECK(topo.expert_dp().size() == d / e * cp);
            CHECK(topo.expert_dp().rank() == c.edp * cp + c.cp);
            CHECK(members(topo.ep()) == expected_expert_members(L, c, 'e'));
            CHECK(members(topo.expert_dp()) == expected_expert_members(L, c, 'x'));
            if (e == 1) {
              CHECK(&topo.expert_dp() == &topo.dp_cp());
              CHECK(members(topo.ep()) == (std::int64_t{1} << me));
              CHECK_THAT(topo.describe(), !tptrain::test::contains(", ep "));
            } else {
              CHECK_THAT(topo.describe(), tptrain::test::contains(", ep " + std::to_string(c.ep) + ")"));
            }
          }
        }
  CHECK(layouts >= 2);
}

TEST_CASE("expert groups on four ranks: data 4 expert 2, tensor 2 data 2 expert 2", "[parallel][topology][mpi]") {
  if (world_size() != 4) return;  // mpi_4
  const int me = world_rank();
  auto bits = [](std::initializer_list<int> ranks) {
    std::int64_t b = 0;
    for (const int r : ranks) b |= std::int64_t{1} << r;
    return b;
  };
  {  // data 4, expert 2: dp = r, expert groups {0,1} {2,3}, expert-data groups {0,2} {1,3}
    Topology topo(MPI_COMM_WORLD, Layout{1, 1, 4, RankOrder::tp_pp_dp, 1, 2});
    CHECK(members(topo.ep()) == (me < 2 ? bits({0, 1}) : bits({2, 3})));
    CHECK(topo.ep().rank() == me % 2);
    CHECK(members(topo.expert_dp()) == (me % 2 == 0 ? bits({0, 2}) : bits({1, 3})));
    CHECK(topo.expert_dp().rank() == me / 2);
    CHECK(members(topo.dp()) == bits({0, 1, 2, 3}));
  }
  {  // tensor 2, data 2, expert 2: tp = r % 2, dp = ep = r / 2; expert groups {0,2} {1,3}, each
     // rank its own expert-data group (every expert on one rank of the group)
    Topology topo(MPI_COMM_WORLD, Layout{2, 1, 2, RankOrder::tp_pp_dp, 1, 2});
    CHECK(members(topo.ep()) == (me % 2 == 0 ? bits({0, 2}) : bits({1, 3})));
    CHECK(topo.ep().rank() == me / 2);
    CHECK(topo.expert_dp().size() == 1);
    CHECK(members(topo.expert_dp()) == bits({me}));
  }
  {  // context 2, data 2, expert 2: cp = r % 2, dp = r / 2; expert groups {0,2} {1,3}, expert-data
     // groups {0,1} {2,3} (the context ranks of one replica hold the same experts)
    Topology topo(MPI_COMM_WORLD, Layout{1, 1, 2, RankOrder::tp_pp_dp, 2, 2});
    CHECK(members(topo.ep()) == (me % 2 == 0 ? bits({0, 2}) : bits({1, 3})));
    CHECK(members(topo.expert_dp()) == (me < 2 ? bits({0, 1}) : bits({2, 3})));
    CHECK(topo.expert_dp().rank() == me % 2);
  }
}

TEST_CASE("an expert size that does not divide data throws on every rank", "[parallel][topology][mpi]") {
  const int n = world_size();
  CHECK_THROWS_WITH(Topology(MPI_COMM_WORLD, Layout{1, 1, n, RankOrder::tp_pp_dp, 1, n + 1}),
                    tptrain::test::contains("must be a divisor of parallel.data"));
  CHECK_THROWS_AS(Topology(MPI_COMM_WORLD, Layout{1, 1, n, RankOrder::tp_pp_dp, 1, 0}), TopologyError);
  int sum = 1;
  MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(sum == n);
}

TEST_CASE("communicator options: the deck's backend keys", "[parallel][topology]") {
  tptrain::io::Deck deck;  // every key at its default
  using DeviceMemory = CommunicatorOptions::DeviceMemory;
  CHECK(communicator_options_of(deck).lanes);
  CHECK(communicator_options_of(deck).mpi_device_memory == DeviceMemory::ask);
  deck.parallel.nccl_pipeline_lanes = false;
  deck.parallel.mpi_device_memory = "off";
  CHECK(!communicator_options_of(deck).lanes);
  CHECK(communicator_options_of(deck).mpi_device_memory == DeviceMemory::no);
  deck.parallel.mpi_device_memory = "on";
  CHECK(communicator_options_of(deck).mpi_device_memory == DeviceMemory::yes);
}
