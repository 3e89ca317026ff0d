#include "src/driver/collective_latency.hpp"

#include "base/mpi_check.hpp"

namespace tptrain::driver {

double measure_all_reduce_latency_s(MPI_Comm comm, int reps) {
  int size = 1;
  TPTRAIN_MPI_CHECK(MPI_Comm_size(comm, &size));
  if (size <= 1) return 0.0;
  double x = 1.0;
  for (int r = 0; r < 50; ++r)  // untimed: the first collectives set up their paths
    TPTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, comm));
  TPTRAIN_MPI_CHECK(MPI_Barrier(comm));
  const double t0 = MPI_Wtime();
  for (int r = 0; r < reps; ++r) TPTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, comm));
  double mean = (MPI_Wtime() - t0) / reps;
  // Rank 0's figure on every rank (they differ by the barrier's skew only).
  TPTRAIN_MPI_CHECK(MPI_Bcast(&mean, 1, MPI_DOUBLE, 0, comm));
  return mean;
}

}  // namespace tptrain::driver
