// The mean over the ranks of `comm` of each rank's `x` (the same on every rank): how bench and
// calibrate report a per-rank measurement.
#pragma once

#include <mpi.h>

#include "base/mpi_check.hpp"

namespace tptrain::driver {

inline double mean_over(MPI_Comm comm, double x) {
  int size = 1;
  TPTRAIN_MPI_CHECK(MPI_Comm_size(comm, &size));
  TPTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, comm));
  return x / size;
}

}  // namespace tptrain::driver
