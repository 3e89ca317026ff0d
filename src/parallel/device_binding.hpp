// Where a rank runs: its node (the ranks that share memory, MPI_COMM_TYPE_SHARED, not launcher
// variables, which differ between mpiexec, srun and others) and the GPU it drives.
//
// Device rule: the rank with node-local rank l drives GPU l % g, g the GPUs visible on the
// node. One rank per GPU is the intended launch (srun --ntasks-per-node = GPUs per node);
// with a launcher that binds one GPU per task (CUDA_VISIBLE_DEVICES set per rank) every rank
// sees g = 1 and drives its own GPU 0.
#pragma once

#include <mpi.h>
#include <string>
#include <vector>

#include "src/parallel/topology.hpp"

namespace tptrain::parallel {

struct NodePlacement {
  int node = 0;        // this rank's node, numbered 0.. in the order of the nodes' lowest world rank
  int nodes = 1;
  int local_rank = 0;  // rank among the ranks of its node
  int local_size = 1;
  std::vector<int> node_of_rank;  // every world rank's node
};

// Collective over `world`.
NodePlacement node_placement(MPI_Comm world);

// Every world rank's host name (gethostname, at most 63 bytes), on every rank. Collective over
// `world`: the rank map and the straggler report name hosts the same way.
std::vector<std::string> host_names(MPI_Comm world);

// GPUs this process can see (0 without a GPU backend). Creates no device context, so it can be
// asked before Kokkos::initialize.
int visible_devices();

// The GPU of node-local rank `local_rank` when `devices` are visible (-1: no devices).
int device_for(int local_rank, int devices);

// "" when every tensor-parallel group of `layout` lies inside one node; else a warning naming
// the first group that spans nodes (TP all-reduces, four per block per micro-batch, would then
// cross the network instead of NVLink).
std::string tensor_groups_spanning_nodes(const Layout& layout, const std::vector<int>& node_of_rank);

}  // namespace tptrain::parallel
