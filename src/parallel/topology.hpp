// The rank grid: world = tensor x context x pipeline x data in the deck's rank order
// (parallel.order; the map itself is src/parallel/topology_rank_map.hpp, docs/design.md "Rank
// layout"), and the communicators of each group. This is the one place that builds it.
//
// Context parallelism (parallel.context = C > 1) adds two groups: the context group (same tp,
// pp, dp; ordered by cp), the ring that ring attention passes K and V around
// (src/model/ring_attention.hpp), and the data-and-context group (same tp and pp; ordered by
// dp·C + cp), over which gradients are summed and the distributed optimizer is sharded: each
// context rank computed the gradient of its chunks' tokens, as a data-parallel replica does of its
// sequences (Megatron's data_parallel_group_with_cp). With C = 1 that group is the data group.
//
// Worked example (Megatron's parallel_state.py explains the same grid): 16 ranks,
// tensor 2, pipeline 4, data 2, order tp-pp-dp. Global rank r has tp = r % 2, pp = (r / 2) % 4,
// dp = r / 8:
//   TP groups (same pp, dp; a TP group sits inside a node): {0,1} {2,3} ... {14,15}
//   PP groups (same tp, dp; ordered by pp):   {0,2,4,6} {1,3,5,7} {8,10,12,14} {9,11,13,15}
//   DP groups (same tp, pp; ordered by dp):   {0,8} {1,9} {2,10} ... {7,15}
//   embedding groups (first and last stage of a PP group): {0,6} {1,7} {8,14} {9,15}
// Order tp-dp-pp: tp = r % 2, dp = (r / 2) % 2, pp = r / 4:
//   TP groups: {0,1} {2,3} ... {14,15} (the same)
//   PP groups: {0,4,8,12} {1,5,9,13} {2,6,10,14} {3,7,11,15}
//   DP groups: {0,2} {1,3} {4,6} {5,7} ... {13,15}
//   embedding groups: {0,12} {1,13} {2,14} {3,15}
// Ranks in the middle stages belong to no embedding group. With pipeline = 1 the embedding
// group of a rank is the rank itself (the tied embedding and output share one copy).
//
// Expert parallelism (parallel.expert = E > 1, a divisor of data D; the mixture of experts,
// src/model/mixture_of_experts.hpp) takes its ranks from the data-parallel ones, as Megatron does,
// and adds no ranks: E consecutive data ranks of a data group form an expert-parallel group, which
// splits the experts among its ranks and exchanges tokens all-to-all. A rank's expert rank is
// ep = dp % E and its expert-data rank edp = dp / E (Coordinates::ep, edp). Two groups:
//   the expert-parallel group, ep() (same tp, cp, pp and edp; ordered by ep; size E): the
//     all-to-all of the token dispatch and combine. With E = 1 it is the rank alone.
//   the expert-data group, expert_dp() (same tp, pp and ep; ordered by edp·C + cp; size D/E·C):
//     the ranks that hold the same experts, over which the experts' gradients are summed and
//     their optimizer state sharded, as dp_cp() does for every other parameter (Megatron's
//     expert_data_parallel_group). With E = 1 it is dp_cp() itself.
// Worked example: 8 ranks, tensor 2, data 4, expert 2, order tp-pp-dp (pipeline 1, context 1).
// Rank r has tp = r % 2, dp = r / 2, so ep = dp % 2 and edp = dp / 2:
//   DP groups:            {0,2,4,6} {1,3,5,7}
//   expert groups, ep():  {0,2} {4,6} {1,3} {5,7}      (dp 0,1 and dp 2,3 of each DP group)
//   expert-data groups, expert_dp(): {0,4} {2,6} {1,5} {3,7}  (same ep: dp 0,2 and dp 1,3)
// Each expert group holds every expert once (model.experts / E on each rank); its ranks run
// different replicas' sequences, so the dense parameters' gradients are still summed over dp_cp().
//
// Hybrid sharding (parallel.shard_group = G, a divisor of D·C; HSDP): the optimizer's shards of
// the dense parameters spread over G consecutive ranks of dp_cp() (by dp·C + cp), not all of it:
//   the shard group, shard() (same tp, pp and (dp·C + cp) / G; ordered by (dp·C + cp) % G), and
//   the replica group, replica() (same tp, pp and (dp·C + cp) % G; ordered by (dp·C + cp) / G):
//     the D·C/G ranks that hold the same shard, over which the shards' gradients are summed.
// Consecutive data x context ranks are the nearest in the world (T·C·P apart with tp-pp-dp, T·C
// with tp-dp-pp), so a shard group sits inside a node when G of them fit one. Without G (or
// G = D·C) shard() is dp_cp() and there is no replica group.
#pragma once

#include <memory>
#include <mpi.h>
#include <stdexcept>
#include <string>

#include "src/parallel/communicator.hpp"
#include "src/parallel/topology_rank_map.hpp"

namespace tptrain::parallel {

// Thrown (identically on every rank) when the world cannot hold the layout.
class TopologyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "mpiexec started N ranks but the deck asks for tensor x context x pipeline x data = M" — empty
// if fine.
std::string world_size_problem(int world_size, const Layout& layout);

class Topology {
 public:
  // Collective over `world`. Throws TopologyError on every rank when the world size does not
  // match the layout or expert does not divide data (no communication happens before the checks,
  // so nobody can hang).
  // `options`: the deck's backend choices for every group (topology_of_deck.hpp).
  Topology(MPI_Comm world, const Layout& layout, const CommunicatorOptions& options = {});

  const Layout& layout() const { return layout_; }
  const Coordinates& coords() const { return coords_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return layout_.world_size(); }
  MPI_Comm world() const { return world_; }

  Communicator& tp() const { return *tp_; }
  Communicator& pp() const { return *pp_; }
  Communicator& dp() const { return *dp_; }
  // The context group, or null without context parallelism (context = 1: no group is built).
  Communicator* cp() const { return cp_.get(); }
  // Data x context: the group of the gradient sum and of the optimizer's shards (dp() when
  // context = 1).
  Communicator& dp_cp() const { return dp_cp_ ? *dp_cp_ : *dp_; }
  // Expert parallelism (the header comment): the expert-parallel group (size parallel.expert,
  // ordered by coords().ep; the rank alone when expert = 1) and the expert-data group (size
  // data / expert · context, ordered by coords().edp · context + coords().cp; dp_cp() when
  // expert = 1), over which the experts' gradients are summed and their optimizer state sharded.
  Communicator& ep() const { return *ep_; }
  Communicator& expert_dp() const { return expert_dp_ ? *expert_dp_ : dp_cp(); }
  // Hybrid sharding (the header comment): the shard group (dp_cp() without it) and the replica
  // group (null without it).
  Communicator& shard() const { return shard_ ? *shard_ : dp_cp(); }
  Communicator* replica() const { return replica_.get(); }
  // Only on the first and last pipeline stage; throws elsewhere.
  Communicator& embedding() const;
  bool in_embedding_group() const { return static_cast<bool>(embedding_); }

  bool is_first_stage() const { return coords_.pp == 0; }
  bool is_last_stage() const { return coords_.pp == layout_.pipeline - 1; }

  // "rank 5 (tp 1, pp 2, dp 0)", with ", cp 1" after tp under context parallelism and ", ep 0"
  // after dp under expert parallelism
  std::string describe() const;

 private:
  MPI_Comm world_;
  Layout layout_;
  Coordinates coords_;
  int world_rank_ = 0;
  std::unique_ptr<Communicator> tp_, pp_, dp_, cp_, dp_cp_, ep_, expert_dp_, embedding_, shard_, replica_;
};

}  // namespace tptrain::parallel
