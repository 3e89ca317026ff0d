// How pipeline transfers meet: the backend's matching rule, the lanes that give each flow a
// queue of its own, and the tags both sides of a transfer agree on. Pure functions, no MPI.
//
//
// Transfers travel in groups (a `post` op: on NCCL one ncclGroupStart/End, on MPI isend/irecv)
// that a later `wait` op completes; between the two the rank computes (PipelineRunner: overlap).
// How transfers meet depends on the backend (Matching):
//   stream_order (NCCL): a rank's groups run one after the other on one stream, so they complete
//         in the order posted, a transfer only while both ranks' current groups hold it, and the
//         i-th send from a rank to a peer must be the i-th receive the peer posts from it.
//         Receives stay where Megatron posts them, together with the sends after a compute:
//         posted before the compute, a receive would hold back the sends queued behind it that
//         its own data depends on.
//   by_tag (MPI): every isend/irecv is its own request, matched by (source, tag) and completed
//         whenever both sides are posted, whatever else is pending. Each receive is posted one
//         compute earlier, before the compute that precedes its use, where that needs no more
//         memory (early_receives, overlap.hpp), so it overlaps that compute.
//   per_flow (NCCL with lanes, Communicator::open_lanes): every flow — the activations from one
//         rank to the next, the gradients back — has a queue of its own on both of its ranks
//         (pipeline_lane), in which its transfers complete in order, matched by order; no flow
//         waits for another. The same ops as by_tag (early receives): a receive posted early
//         holds back only later receives of its own flow, which come after it anyway.
#pragma once

#include "src/schedule/pipeline_schedule.hpp"

namespace tptrain::schedule {

// The lane (Communicator::open_lanes) of the flow of `direction` (0: activations to the next
// rank, 1: gradients to the previous) sent by rank `sender` of `ranks`: direction·colours +
// the sender's colour, where neighbours around the ring have different colours (2 colours; 3
// when `ranks` is odd, the last rank the third). Then on every rank each lane carries one flow
// only: the rank's own sends of that direction, or its receives from the one neighbour that
// sends it that direction. pipeline_lanes: how many lanes that is (0 for one rank).
int pipeline_lane(int sender, int ranks, int direction);
int pipeline_lanes(int ranks);

// The chunk of the peer rank that a transfer of `place` talks to.
int peer_chunk(const PipelinePlace& place, const PipelineTransfer& t);
// The message tag of a transfer: from the receiving virtual stage, the micro-batch and the
// direction; the same on both sides (v = 1: 2m + direction).
int transfer_tag(const PipelinePlace& place, const PipelineTransfer& t);

}  // namespace tptrain::schedule
