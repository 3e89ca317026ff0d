#include "src/schedule/transport.hpp"

namespace tptrain::schedule {

const char* matching_name(Matching m) {
  switch (m) {
    case Matching::stream_order: return "in order (NCCL)";
    case Matching::by_tag: return "by tag (MPI)";
    case Matching::per_flow: return "per flow (NCCL lanes)";
  }
  return "?";
}

namespace {
int lane_colours(int ranks) { return ranks % 2 == 1 ? 3 : 2; }
}  // namespace

int pipeline_lane(int sender, int ranks, int direction) {
  // A ring of even length takes 2 colours alternately; an odd one needs a third for its last
  // rank, whose neighbours (ranks - 2 and 0) both have colour 0.
  const int colour = ranks % 2 == 1 && sender == ranks - 1 ? 2 : sender % 2;
  return direction * lane_colours(ranks) + colour;
}

int pipeline_lanes(int ranks) { return ranks > 1 ? 2 * lane_colours(ranks) : 0; }

int peer_chunk(const PipelinePlace& place, const PipelineTransfer& t) {
  // Over the wrap from the last rank to rank 0 the chunk changes: activations go from chunk c of
  // rank p − 1 to chunk c + 1 of rank 0, gradients back.
  if (t.peer > 0 && place.rank == place.ranks - 1) return t.chunk + 1;
  if (t.peer < 0 && place.rank == 0) return t.chunk - 1;
  return t.chunk;
}

int transfer_tag(const PipelinePlace& place, const PipelineTransfer& t) {
  const int receiver_chunk = t.send ? peer_chunk(place, t) : t.chunk;
  return 2 * (t.micro_batch * place.chunks + receiver_chunk) + t.direction;
}

}  // namespace tptrain::schedule
