// Bytes per step that cross node boundaries, by group, for a rank order (docs/planning.md,
// "Across nodes"). The ranks are placed node by node, g per node: world rank r on node
// floor(r / g), as srun and mpiexec place them by default and as the runtime's warning
// (src/parallel/device_binding.hpp) assumes.
//
// A collective's ring (tensor, data x context and embedding groups) enters and leaves each node of
// its group once, as NCCL builds its rings: a group spanning n > 1 nodes sends n times its
// per-rank bytes (src/plan/communication.hpp) across node boundaries, one that stays in a node
// nothing. The context group's point-to-point ring (ring attention: rank i sends to i + 1 mod C)
// does the same: its members are T ranks apart in increasing order, so the ring crosses once per
// node boundary between its first and last member and once more on its way back. A pipeline
// group sends pipeline_link_bytes across for each pair of neighbouring stages on different nodes.
//
// Counted by formula, not by enumerating ranks: the first ranks of a kind of group form a lattice
// base + e1·u + e2·i + e3·w (u < n1, i < n2, w < n3), and what crosses is a sum of
// floor((x + c)/g) over it. Axes that continue one another (e_a·n_a = e_b: the context axis and the
// one after it in the rank order, tensor and context) merge into one; a Euclid-like floor sum
// runs along the longest axis and a loop over the others: O(min(n1, n2) · log) — at most
// √(2^31) ≈ 46341 steps — for every lattice with two axes left, which is every one but the data x
// context groups of the middle stages under tp-cp-pp-dp (tensor x (pipeline − 2) x data first
// ranks: at most (2^31)^(2/3) ≈ 1.7 million steps, a few for the layouts people run). The context
// groups are counted over all stages at once, whose ranks send the same around their rings.
//
// A mixture of experts (parallel.expert = ep > 1): each expert group's all-to-all sends every
// member's bytes to each other member in equal parts, so what crosses is the pairs of members on
// different nodes (all_to_all_crossings) times a member's bytes for one other member; the
// expert-data groups (the experts' gradients: C context ranks T apart, data / ep blocks of them
// ep·σd apart) are rings of blocks, as the data x context groups, over the ep ranks of each expert
// group besides.
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

// Groups of one kind: their first ranks base + e1·u + e2·i + e3·w (u < n1, i < n2, w < n3), each
// group the ranks first + j·stride, j < members.
struct GroupLattice {
  std::int64_t base = 0, e1 = 0, n1 = 1, e2 = 0, n2 = 1;
  std::int64_t stride = 1;
  std::int64_t members = 1;
  std::int64_t e3 = 0, n3 = 1;
};

// Ring edges across node boundaries, summed over the groups (a group on n > 1 nodes: n).
Count ring_crossings(const GroupLattice& groups, std::int64_t gpus_per_node);
// Pairs of neighbouring members on different nodes, summed over the groups (pipeline stages).
Count chain_crossings(const GroupLattice& groups, std::int64_t gpus_per_node);
// Ring edges across node boundaries of groups made of `blocks` blocks: the members of a group are
// first + j·stride + k·block_stride (j < members, k < blocks; (members − 1)·stride < block_stride),
// first over `groups`' lattice, which must leave its third axis free (n3 = 1) unless the members
// are evenly spaced. The data x context group under tp-cp-pp-dp: C context ranks T apart, D
// blocks of them T·C·P apart.
Count blocked_ring_crossings(const GroupLattice& groups, std::int64_t block_stride, std::int64_t blocks,
                             std::int64_t gpus_per_node);

// The expert-parallel groups' all-to-alls: over `world` ranks, the groups {b + stride·(members·q + j),
// j < members} for every b < stride and q (world a multiple of stride·members: in both rank orders
// the expert groups of every stage, stride the data axis's). Returns the ordered pairs (sender,
// receiver) of a group's members on different nodes, summed over the groups: members · (members −
// 1) per group when stride ≥ g, none for a group inside a node. By formula: the pairs on one node
// are those of an interval of ranks inside one node and one block of stride·members ranks, which
// hold c_b ranks of each residue b mod stride, L mod stride residues ⌊L/stride⌋ + 1 times and the
// others ⌊L/stride⌋ times (L the interval's length, whatever its start); the intervals are cut by
// the multiples of g and of stride·members, periodic in the coarser with period the finer /
// gcd: O(min(world / coarser, finer)) ≤ O(√world) steps.
Count all_to_all_crossings(std::int64_t world, std::int64_t stride, std::int64_t members, std::int64_t gpus_per_node);

// Bytes per step, over all ranks, that cross node boundaries in each group.
struct CrossNodeBytes {
  parallel::RankOrder order = parallel::RankOrder::tp_pp_dp;
  double tensor = 0, context = 0, pipeline = 0, data = 0, embedding = 0;
  double expert = 0, expert_data = 0;  // a mixture of experts: the all-to-alls, the experts' gradients
  double total() const { return tensor + context + pipeline + data + embedding + expert + expert_data; }
};

CrossNodeBytes cross_node_bytes(const Config& c, const StageParameters& stage_parameters, parallel::RankOrder order,
                                std::int64_t gpus_per_node);

}  // namespace tptrain::plan
