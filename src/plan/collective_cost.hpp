// Seconds a collective takes on a machine (docs/planning.md, "Collectives"), by the algorithm
// NCCL would run, over the links its ranks span. A group's span is counted from the rank map
// (parallel.order, ranks placed node by node): how many nodes it touches and the most members one
// node holds.
//
// k members on n nodes, at most g of them on one node; S the buffer; B, L the node link's
// bandwidth and latency, Bn, Ln the network's (per device, per direction); the collectives take
// the machine file's collective_bandwidth_gbs for B where it has one (the library's bus
// bandwidth, nccl-tests' busBw: 2(k−1)/k·S over the time of an all-reduce):
//   ring all-reduce      2(k−1)/k·S per rank: on one node 2(k−1)/k·S/B + 2(k−1)·L; across nodes
//                        max(2(k−1)/k·S/B, 2(k−1)/k·S/(g·Bn)) + 2(k−1)·Ln (NCCL's channels spread a
//                        node's ring crossings over the g members' NICs)
//   tree all-reduce      (NCCL's double binary tree, across nodes only) the ring's bandwidth term
//                        with 2·⌈log2 n⌉·Ln + 2(g−1)·L of latency: NCCL picks it where the latency
//                        dominates (small buffers, many nodes); the faster of the two is taken
//   all-gather, reduce-scatter  (ring) (k−1)/k·S per rank, (k−1) latencies
//   all-to-all           S·(g−1)/k over the node link, S·(k−g)/k over the network, at once: the
//                        slower of the two, plus one latency of the slowest link
//   point to point       S/B + L inside a node, S/Bn + Ln across
#pragma once

#include <cstdint>
#include <vector>

#include "src/plan/machine.hpp"

namespace tptrain::plan {

struct GroupSpan {
  std::int64_t members = 1;
  std::int64_t nodes = 1;
  std::int64_t most_on_a_node = 1;
};

// The span of the world ranks `ranks` on nodes of `devices_per_node`.
GroupSpan span_of(const std::vector<std::int64_t>& ranks, int devices_per_node);

// Bytes each rank sends in a ring all-reduce of `bytes` over k ranks: 2(k−1)/k·bytes.
double ring_all_reduce_bytes(double bytes, std::int64_t k);

double ring_all_reduce_seconds(const Machine& m, const GroupSpan& g, double bytes);
double tree_all_reduce_seconds(const Machine& m, const GroupSpan& g, double bytes);
// The faster of ring and (across nodes) tree, as NCCL's tuner picks.
double all_reduce_seconds(const Machine& m, const GroupSpan& g, double bytes);
// All-gather or reduce-scatter; `bytes` the gathered (whole) size.
double all_gather_seconds(const Machine& m, const GroupSpan& g, double bytes);
// All-to-all: `bytes` is what one rank holds before it, (k−1)/k of which leaves it.
double all_to_all_seconds(const Machine& m, const GroupSpan& g, double bytes);
double point_to_point_seconds(const Machine& m, bool across_nodes, double bytes);

}  // namespace tptrain::plan
