// The node's collectives as training meets them: `bench --calibrate`'s [node]
// collective_bandwidth_gbs and communication_host_share. An all-reduce runs through the backend
// tptrain's layers use (parallel::make_communicator: NCCL on a CUDA build, MPI otherwise) on a
// buffer of the deck's tensor-parallel all-reduce ([micro_batch·S/C, hidden] in its precision):
//  - its bus bandwidth, as nccl-tests defines busBw: the 2(k − 1)/k·S bytes a ring all-reduce of
//    S bytes sends per rank, over its time less the ring's 2(k − 1) latencies. MPI's collectives
//    on a CPU node reduce on the host and copy through shared memory: a third of the ping-pong's
//    rate on this project's machine;
//  - the host's share of it: the all-reduce started, a kernel of at least twice its time queued
//    behind it, then waited for. A backend that progresses on its own (NCCL's stream) hides it
//    behind the kernel: 0; MPI without a progress thread moves the bytes only inside its calls,
//    after the kernel: 1.
#pragma once

#include <cstdint>
#include <mpi.h>
#include <string>

namespace tptrain::driver {

struct CollectiveRate {
  double bus_bandwidth_gbs = 0;  // 0: fewer than 2 ranks
  double host_share = 0;         // in [0, 1]
  double all_reduce_s = 0;       // the all-reduce alone (median)
  double kernel_s = 0;           // the kernel alone (median)
  double together_s = 0;         // the all-reduce, then the kernel, then its wait (median)
  std::string backend;           // the communicator's (Communicator::backend_name)
};

// Over `comm` (every rank calls it; the same result on every rank, the ranks' mean), an
// all-reduce of `elements` of T (float, kx::bf16, kx::fp16); `latency_s` the ring's latency per
// step, taken out of the bandwidth's time.
template <class T>
CollectiveRate measure_collective_rate(MPI_Comm comm, std::int64_t elements, double latency_s, int reps = 9);

}  // namespace tptrain::driver
