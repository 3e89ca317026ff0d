// The rank map: which world rank holds which (tp, cp, pp, dp) coordinates, for the two orders a
// deck may choose (parallel.order, docs/design.md "Rank layout"). Pure arithmetic, no MPI: the
// topology (src/parallel/topology.hpp) builds its communicators from it, and the planner
// (src/plan/cross_node.hpp) counts the bytes that cross node boundaries with it.
//
//   tp-cp-pp-dp (the default): r = tp + T·(cp + C·(pp + P·dp))   tensor fastest, data slowest
//   tp-cp-dp-pp (Megatron's):  r = tp + T·(cp + C·(dp + D·pp))   tensor fastest, pipeline slowest
//
// Tensor is fastest in both, so a tensor group is T consecutive ranks either way, and context
// next (Megatron's tp-cp-ep-dp-pp: the ring of a context group, which moves K and V every layer,
// stays within a node where T·C fits one). The orders differ only in whether a node of
// consecutive ranks holds neighbouring pipeline stages (tp-cp-pp-dp) or neighbouring data-parallel
// replicas (tp-cp-dp-pp). With pipeline = 1 or data = 1 the two maps are the same. Without
// context parallelism (C = 1) the deck may spell them "tp-pp-dp" and "tp-dp-pp" (the same maps).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace tptrain::parallel {

enum class RankOrder { tp_pp_dp, tp_dp_pp };

// "tp-pp-dp", "tp-dp-pp": the deck's spelling without context parallelism.
std::string_view rank_order_name(RankOrder order);
// "tp-cp-pp-dp", "tp-cp-dp-pp": the spelling with the context axis.
std::string_view rank_order_name_with_context(RankOrder order);
// Either spelling. Throws std::invalid_argument naming the allowed values (the deck has checked
// them already).
RankOrder rank_order_from_name(std::string_view name);

struct Layout {
  int tensor = 1;
  int pipeline = 1;
  int data = 1;
  RankOrder order = RankOrder::tp_pp_dp;
  int context = 1;  // parallel.context: ranks that split each sequence (context parallelism)
  // parallel.expert: expert parallelism, a divisor of data. It takes its ranks from the
  // data-parallel ones (Megatron) and does not multiply the world: expert = E splits each data
  // group's consecutive replicas into expert-parallel groups of E (src/parallel/topology.hpp).
  int expert = 1;
  // parallel.shard_group: hybrid sharding (HSDP), the optimizer's shards spread over groups of this
  // many consecutive data x context ranks, replicated across the groups (0: one group of all).
  int shard_group = 0;
  int world_size() const { return tensor * context * pipeline * data; }
};

// A rank's place on each axis. ep and edp are not axes of their own but dp split by the expert
// size: ep = dp % expert (the rank in its expert-parallel group), edp = dp / expert (the
// expert-data rank, which of the data / expert expert-parallel groups of its data group it is in).
// coordinates_of fills them; world_rank_of reads only tp, cp, pp and dp.
struct Coordinates {
  int tp = 0;
  int pp = 0;
  int dp = 0;
  int cp = 0;
  int ep = 0;
  int edp = 0;
};

// World ranks between neighbours along each axis: a group of that axis is the ranks
// first + i·stride. Tensor's is 1 in both orders.
struct Strides {
  long long tensor = 1;
  long long pipeline = 1;
  long long data = 1;
  long long context = 1;
};
Strides strides_of(const Layout& layout);

Coordinates coordinates_of(int world_rank, const Layout& layout);
int world_rank_of(const Coordinates& c, const Layout& layout);

}  // namespace tptrain::parallel
