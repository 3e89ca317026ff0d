// Rank placement: nodes from MPI's shared-memory split, one GPU per node-local rank, and the
// warning for tensor-parallel groups that cross nodes.
#include <mpi.h>

#include "catch.hpp"
#include "src/parallel/device_binding.hpp"

using namespace tptrain::parallel;

TEST_CASE("node-local rank r drives GPU r mod the GPUs of its node", "[parallel][devices]") {
  CHECK(device_for(0, 8) == 0);
  CHECK(device_for(7, 8) == 7);
  CHECK(device_for(9, 8) == 1);  // more ranks than GPUs: round robin (and a warning at start)
  CHECK(device_for(3, 1) == 0);  // one GPU visible per task (srun --gpu-bind): always its own
  CHECK(device_for(0, 0) == -1);  // no GPU backend
}

TEST_CASE("every rank of this job is placed on a node", "[parallel][devices][mpi]") {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const NodePlacement p = node_placement(MPI_COMM_WORLD);
  // ctest starts every rank on this one machine.
  CHECK(p.nodes == 1);
  CHECK(p.node == 0);
  CHECK(p.local_rank == rank);
  CHECK(p.local_size == size);
  REQUIRE(p.node_of_rank.size() == static_cast<std::size_t>(size));
  for (int n : p.node_of_rank) CHECK(n == 0);
}

TEST_CASE("a tensor-parallel group that spans nodes is named", "[parallel][devices]") {
  // 16 ranks on 2 nodes of 8 GPUs, node-contiguous: tensor 8 fits, tensor 16 spans both.
  std::vector<int> two_nodes(16);
  for (int r = 0; r < 16; ++r) two_nodes[static_cast<std::size_t>(r)] = r / 8;
  CHECK(tensor_groups_spanning_nodes(Layout{8, 1, 2}, two_nodes).empty());
  CHECK(tensor_groups_spanning_nodes(Layout{2, 2, 4}, two_nodes).empty());
  const std::string spans = tensor_groups_spanning_nodes(Layout{16, 1, 1}, two_nodes);
  CHECK_THAT(spans, tptrain::test::contains("world ranks 0..15 spans nodes 0 to 1"));
  // 3 GPUs per node: the second TP group of 2 has a rank on each of nodes 0 and 1.
  std::vector<int> three_per_node{0, 0, 0, 1, 1, 1};
  CHECK_THAT(tensor_groups_spanning_nodes(Layout{2, 1, 3}, three_per_node),
             tptrain::test::contains("world ranks 2..3 spans nodes 0 to 1"));
  // The warning follows parallel.order: 8 ranks, tensor 2 x pipeline 2 x data 2, 3 GPUs per node.
  // Ranks 2..3 straddle nodes 0 and 1; they are (pp 1, dp 0) in tp-pp-dp, (pp 0, dp 1) in tp-dp-pp.
  const std::vector<int> threes{0, 0, 0, 1, 1, 1, 2, 2};
  CHECK_THAT(tensor_groups_spanning_nodes(Layout{2, 2, 2, RankOrder::tp_pp_dp}, threes),
             tptrain::test::contains("world ranks 2..3 spans nodes 0 to 1 (pp 1, dp 0; parallel.order = \"tp-pp-dp\")"));
  CHECK_THAT(tensor_groups_spanning_nodes(Layout{2, 2, 2, RankOrder::tp_dp_pp}, threes),
             tptrain::test::contains("world ranks 2..3 spans nodes 0 to 1 (pp 0, dp 1; parallel.order = \"tp-dp-pp\")"));
  // Against the groups enumerated from the rank map, for every placement of 8 ranks on nodes of
  // 1..8 GPUs and every layout and order.
  for (const RankOrder order : {RankOrder::tp_pp_dp, RankOrder::tp_dp_pp})
    for (const int T : {1, 2, 4, 8})
      for (const int P : {1, 2, 4})
        for (const int g : {1, 2, 3, 4, 5, 8}) {
          if (8 % (T * P) != 0) continue;
          const Layout L{T, P, 8 / (T * P), order};
          std::vector<int> nodes(8);
          for (int r = 0; r < 8; ++r) nodes[static_cast<std::size_t>(r)] = r / g;
          bool any_spans = false;
          for (int r = 0; r < 8; ++r)
            for (int q = 0; q < 8; ++q) {
              const Coordinates a = coordinates_of(r, L), b = coordinates_of(q, L);
              if (a.pp == b.pp && a.dp == b.dp && nodes[static_cast<std::size_t>(r)] != nodes[static_cast<std::size_t>(q)])
                any_spans = true;
            }
          INFO("tensor " << T << " pipeline " << P << ", " << g << " GPUs per node, " << rank_order_name(order));
          CHECK(tensor_groups_spanning_nodes(L, nodes).empty() == !any_spans);
        }
  // Round-robin placement (rank r on node r % 2) breaks every group of 2.
  CHECK_FALSE(tensor_groups_spanning_nodes(Layout{2, 1, 2}, {0, 1, 0, 1}).empty());
}
