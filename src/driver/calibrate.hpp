// `tptrain bench --calibrate OUT.toml`: measures the machine the job runs on and writes its
// machine file (docs/planning.md, "The machine file"; io/machine_file.hpp), for `plan --machine`.
//   - GEMM: the rate through the model's GEMM seam (gemm_peak.hpp) of the deck's own linear
//     layers, forward and both backward GEMMs (dx, dW), those of the standard bench models
//     (input/bench/tiny.toml, small.toml, gpt2-124m.toml; at tensor 1 and 2, at their micro-batch
//     and at a half and a quarter of it) and a square 2048, every rank measuring at once as in
//     training, each shape's rate its median run's (run_rate.hpp: every rate below is, but the
//     triad's best). The best of them is the precision's peak (so max_efficiency = 1), each shape a [[gemm.measured]]
//     row of its rate over that peak. The deck's precision is measured on every shape, the other
//     two on the square 2048 only.
//   - attention: the flash core's rate, forward + backward, on the deck's attention
//     (attention_rate.hpp): [gemm] attention_efficiency, its rate over the GEMM peak; the standard
//     models' rates in the comments.
//   - kernel_overhead_us: the time a kernel launch adds (kernel_overhead.hpp).
//   - memory: STREAM's triad (stream_triad.hpp), every rank at once: the bandwidth per rank.
//   - kernel_bandwidth_gbs: tptrain's LayerNorm and GELU kernels' bytes/s as the planner counts
//     their bytes (memory_kernel_rate.hpp), at the deck's micro-batch.
//   - optimizer_bandwidth_gbs: tptrain's AdamW, gradient-norm and zero_grad kernels' bytes/s as
//     the planner counts their bytes (optimizer_rate.hpp), on the rank's parameters.
//   - a mixture of experts: its experts' GEMMs at their balanced rows besides the deck's layers.
//   - oversubscription: with more ranks than usable cores on the node, the per-rank rates are
//     scaled by cores/ranks (each measurement is a whole core's: it fits in a time slice).
//   - node: the ranks of this node (MPI_Comm_split_type shared); latency and bandwidth of MPI
//     between its ranks 0 and 1 by ping-pong (ping_pong.hpp), the latency raised to an 8-byte
//     all-reduce's over 2(k - 1) where that is more (collective_latency.hpp); the collectives'
//     bus bandwidth and the host's share of their time, an all-reduce of the deck's
//     tensor-parallel size through tptrain's communicator (collective_rate.hpp). With one rank in
//     the node nothing is measured: the file says so and carries the defaults below.
//   - network: not measured: the node's link figures.
#pragma once

#include <string>

#include "io/deck.hpp"
#include "src/parallel/topology.hpp"

namespace tptrain::driver {

// Defaults written with one rank in the node (no ping-pong possible): MPI over shared memory on
// a current x86 server, the order of magnitude the OSU latency and bandwidth tests report there.
inline constexpr double kDefaultLinkLatencyUs = 1.0;
inline constexpr double kDefaultLinkBandwidthGbs = 5.0;

// Collective over the world; rank 0 writes `path` and prints a summary and one JSON line
// ({"calibrate": ...}). Throws parallel::AgreedError naming the path when it cannot write it.
int run_calibrate(const io::Deck& deck, const parallel::Topology& topo, const std::string& path);

}  // namespace tptrain::driver
