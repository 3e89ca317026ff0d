// Bytes per step that cross node boundaries, by group, for a rank order (docs/planning.md,
// "Across nodes"). The ranks are placed node by node, g per node: world rank r on node
// floor(r / g), as srun and mpiexec place them by default and as the runtime's warning
// (src/parallel/device_binding.hpp) assumes.
//
// A collective's ring (tensor, data and embedding groups) enters and leaves each node of its
// group once, as NCCL builds its rings: a group spanning n > 1 nodes sends n times its per-rank
// bytes (src/plan/communication.hpp) across node boundaries, one that stays in a node nothing.
// A pipeline group sends pipeline_link_bytes across for each pair of neighbouring stages on
// different nodes.
//
// Counted by formula, not by enumerating ranks: the first ranks of a kind of group form a lattice
// base + e1·u + e2·i (u < n1, i < n2), and what crosses is a sum of floor((x + c)/g) over it:
// O(min(n1, n2) · log) — at most √(2^31) ≈ 46341 steps of a Euclid-like sum, whatever the GPUs.
#pragma once

#include <cstdint>

#include "src/parallel/topology_rank_map.hpp"
#include "src/plan/communication.hpp"
#include "src/plan/count.hpp"
#include "src/plan/parameter_count.hpp"
#include "src/plan/plan_config.hpp"

namespace tptrain::plan {

// Σ_{i<n} floor((a·i + b)/m), for a, b ≥ 0 and m ≥ 1 (the floor sum of competitive programming
// libraries: Euclid's algorithm on (a, m)).
Count floor_sum(Count n, Count m, Count a, Count b);

// Groups of one kind: their first ranks base + e1·u + e2·i (u < n1, i < n2), each group the
// ranks first + j·stride, j < members.
struct GroupLattice {
  std::int64_t base = 0, e1 = 0, n1 = 1, e2 = 0, n2 = 1;
  std::int64_t stride = 1;
  std::int64_t members = 1;
};

// Ring edges across node boundaries, summed over the groups (a group on n > 1 nodes: n).
Count ring_crossings(const GroupLattice& groups, std::int64_t gpus_per_node);
// Pairs of neighbouring members on different nodes, summed over the groups (pipeline stages).
Count chain_crossings(const GroupLattice& groups, std::int64_t gpus_per_node);

// Bytes per step, over all ranks, that cross node boundaries in each group.
struct CrossNodeBytes {
  parallel::RankOrder order = parallel::RankOrder::tp_pp_dp;
  double tensor = 0, pipeline = 0, data = 0, embedding = 0;
  double total() const { return tensor + pipeline + data + embedding; }
};

CrossNodeBytes cross_node_bytes(const Config& c, const StageParameters& stage_parameters, parallel::RankOrder order,
                                std::int64_t gpus_per_node);

}  // namespace tptrain::plan
