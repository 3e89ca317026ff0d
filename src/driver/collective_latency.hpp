// The latency an MPI collective pays over all the ranks of a node, as training meets it: the mean
// time of an 8-byte MPI_Allreduce over the communicator, every rank taking part. The planner's
// ring all-reduce counts 2(k − 1) link latencies for k ranks (src/plan/collective_cost.hpp), so
// the mean over 2(k − 1) is a latency per step in its terms. Unlike the ping-pong between two
// ranks (ping_pong.hpp), it includes what oversubscription costs: with more ranks than cores a
// collective waits until every rank has been scheduled.
#pragma once

#include <mpi.h>

namespace tptrain::driver {

// Seconds per 8-byte MPI_Allreduce over `comm`, the mean of `reps` after a barrier (the same
// result on every rank); 0 for a communicator of one rank.
double measure_all_reduce_latency_s(MPI_Comm comm, int reps = 2000);

}  // namespace tptrain::driver
