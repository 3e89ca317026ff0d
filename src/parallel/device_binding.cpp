#include "src/parallel/device_binding.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <unistd.h>
#include <fmt/format.h>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

#include "base/mpi_check.hpp"

namespace tptrain::parallel {

NodePlacement node_placement(MPI_Comm world) {
  NodePlacement p;
  int world_rank = 0, world_size = 1;
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(world, &world_rank));
  TPTRAIN_MPI_CHECK(MPI_Comm_size(world, &world_size));
  MPI_Comm node = MPI_COMM_NULL;
  TPTRAIN_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(node, &p.local_rank));
  TPTRAIN_MPI_CHECK(MPI_Comm_size(node, &p.local_size));
  // A node is named by its lowest world rank (the node's local rank 0: the split keeps the
  // world order), then numbered densely.
  int leader = world_rank;
  TPTRAIN_MPI_CHECK(MPI_Bcast(&leader, 1, MPI_INT, 0, node));
  MPI_Comm_free(&node);
  std::vector<int> leader_of(static_cast<std::size_t>(world_size));
  TPTRAIN_MPI_CHECK(MPI_Allgather(&leader, 1, MPI_INT, leader_of.data(), 1, MPI_INT, world));
  std::vector<int> leaders = leader_of;
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  p.nodes = static_cast<int>(leaders.size());
  p.node_of_rank.resize(leader_of.size());
  for (std::size_t r = 0; r < leader_of.size(); ++r)
    p.node_of_rank[r] =
        static_cast<int>(std::lower_bound(leaders.begin(), leaders.end(), leader_of[r]) - leaders.begin());
  p.node = p.node_of_rank[static_cast<std::size_t>(world_rank)];
  return p;
}

std::vector<std::string> host_names(MPI_Comm world) {
  int size = 1;
  TPTRAIN_MPI_CHECK(MPI_Comm_size(world, &size));
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  std::vector<char> all(static_cast<std::size_t>(size) * sizeof(host));
  TPTRAIN_MPI_CHECK(MPI_Allgather(host, sizeof(host), MPI_CHAR, all.data(), sizeof(host), MPI_CHAR, world));
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) out.emplace_back(&all[static_cast<std::size_t>(r) * sizeof(host)]);
  return out;
}

int visible_devices() {
#if defined(KOKKOS_ENABLE_CUDA)
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear it: Kokkos::initialize reports the real problem
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

int device_for(int local_rank, int devices) { return devices > 0 ? local_rank % devices : -1; }

std::string tensor_groups_spanning_nodes(const Layout& layout, const std::vector<int>& node_of_rank) {
  if (node_of_rank.size() != static_cast<std::size_t>(layout.world_size())) return "";
  // The groups in the deck's rank order: the tp = 0 rank of each (pp, dp), then its tensor stride.
  const int T = layout.tensor;
  const long long stride = strides_of(layout).tensor;
  for (int first = 0; first < layout.world_size(); ++first) {
    const Coordinates c = coordinates_of(first, layout);
    if (c.tp != 0) continue;
    int lo = node_of_rank[static_cast<std::size_t>(first)], hi = lo;
    for (int i = 1; i < T; ++i) {
      const int node = node_of_rank[static_cast<std::size_t>(first + i * stride)];
      lo = std::min(lo, node);
      hi = std::max(hi, node);
    }
    if (lo == hi) continue;
    const int last = world_rank_of(Coordinates{T - 1, c.pp, c.dp}, layout);
    return fmt::format(
        "the tensor-parallel group of world ranks {}..{} spans nodes {} to {} (pp {}, dp {}; parallel.order = \"{}\"): "
        "its all-reduces (four per block per micro-batch) cross the network. Keep parallel.tensor <= the ranks per "
        "node and start the ranks node by node (srun/mpiexec block distribution), so that each TP group lies "
        "inside one node",
        first, last, lo, hi, c.pp, c.dp, rank_order_name(layout.order));
  }
  return "";
}

}  // namespace tptrain::parallel
