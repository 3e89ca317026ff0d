// MPI latency and bandwidth between two ranks, by ping-pong (as the OSU micro-benchmarks'
// osu_latency and the Intel MPI Benchmarks' PingPong do): rank 0 sends, rank 1 sends back; half a
// round trip is one message's time. Latency from 8-byte messages, bandwidth from 4 MiB ones
// (bytes over half the round trip). Host memory: MPI's own path between the ranks (shared memory
// inside a node), not NCCL's between GPUs.
#pragma once

#include <mpi.h>

#include <cstdint>

namespace tptrain::driver {

struct PingPong {
  bool measured = false;  // false: the communicator has one rank
  double latency_us = 0;
  double bandwidth_gbs = 0;  // 1e9 bytes/s, one direction
};

// Collective over `comm` (ranks 2 and up only wait): the same result on every rank.
PingPong measure_ping_pong(MPI_Comm comm, std::int64_t large_bytes = std::int64_t(4) << 20);

}  // namespace tptrain::driver
