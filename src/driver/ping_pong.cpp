#include "src/driver/ping_pong.hpp"

#include <algorithm>
#include <vector>

#include "base/mpi_check.hpp"

namespace tptrain::driver {

namespace {

// The best (shortest) of `trials` timings of `reps` round trips of `bytes` between ranks 0 and 1,
// per round trip, in seconds; on rank 0 (rank 1 returns 0).
double round_trip_s(MPI_Comm comm, int rank, std::vector<char>& buffer, int bytes, int reps, int trials) {
  double best = 1e30;
  for (int t = 0; t < trials; ++t) {
    TPTRAIN_MPI_CHECK(MPI_Barrier(comm));
    const double t0 = MPI_Wtime();
    for (int r = 0; r < reps; ++r) {
      if (rank == 0) {
        TPTRAIN_MPI_CHECK(MPI_Send(buffer.data(), bytes, MPI_BYTE, 1, 0, comm));
        TPTRAIN_MPI_CHECK(MPI_Recv(buffer.data(), bytes, MPI_BYTE, 1, 0, comm, MPI_STATUS_IGNORE));
      } else if (rank == 1) {
        TPTRAIN_MPI_CHECK(MPI_Recv(buffer.data(), bytes, MPI_BYTE, 0, 0, comm, MPI_STATUS_IGNORE));
        TPTRAIN_MPI_CHECK(MPI_Send(buffer.data(), bytes, MPI_BYTE, 0, 0, comm));
      }
    }
    best = std::min(best, (MPI_Wtime() - t0) / reps);
  }
  return rank == 0 ? best : 0.0;
}

}  // namespace

PingPong measure_ping_pong(MPI_Comm comm, std::int64_t large_bytes) {
  int rank = 0, size = 1;
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  TPTRAIN_MPI_CHECK(MPI_Comm_size(comm, &size));
  PingPong p;
  if (size < 2) return p;
  const int large = static_cast<int>(large_bytes);
  std::vector<char> buffer(static_cast<std::size_t>(large), 1);
  // One untimed round of each size: connection set-up, first touch.
  round_trip_s(comm, rank, buffer, 8, 10, 1);
  round_trip_s(comm, rank, buffer, large, 1, 1);
  const double small_s = round_trip_s(comm, rank, buffer, 8, 200, 5);
  const double large_s = round_trip_s(comm, rank, buffer, large, 4, 5);
  double out[2] = {small_s / 2 * 1e6, large_s > 0 ? large_bytes / (large_s / 2) / 1e9 : 0.0};
  TPTRAIN_MPI_CHECK(MPI_Bcast(out, 2, MPI_DOUBLE, 0, comm));
  p.measured = true;
  p.latency_us = out[0];
  p.bandwidth_gbs = out[1];
  return p;
}

}  // namespace tptrain::driver
