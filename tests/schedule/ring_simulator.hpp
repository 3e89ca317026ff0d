// A simulator of ring attention's schedule (tests only; src/schedule/ring_schedule.hpp): runs
// every rank's ops together under a backend's matching rule (schedule::Matching) and reports the
// first deadlock, mismatch or race. It follows what the buffers hold — which rank's K and V block,
// which ranks' dK and dV sums of which block — so that it also proves the ring computes rank r − i's
// block at step i and brings every block's sums, from every rank, back to its owner.
//
// Rules: posts never block; a wait blocks until its group completed. stream_order (NCCL): a rank's
// groups complete one after the other in posting order, a transfer only while the groups holding
// both of its sides are the ranks' current ones, the i-th send from a rank to a peer meeting the
// i-th receive the peer posts from it (which must be of the same flow); by_tag (MPI): a transfer
// completes once both sides are posted, the i-th send of a tag meeting the peer's i-th receive of
// it; per_flow (NCCL lanes): by tag, each flow's transfers completing in order. Races: a compute
// reading a block not yet received, a receive into a buffer a pending send or a later compute
// still reads, a send of sums not yet added up.
#pragma once

#include <string>
#include <vector>

#include "src/schedule/pipeline_schedule.hpp"
#include "src/schedule/ring_schedule.hpp"

namespace tptrain::schedule {

// "" when every rank finished with the right blocks and sums, else the first problem.
std::string simulate_ring(const std::vector<std::vector<RingOp>>& ops, bool backward, Matching matching);
// The schedule's own ops on every rank of a ring of `ranks`.
std::string simulate_ring(int ranks, bool backward, Matching matching);

}  // namespace tptrain::schedule
