// MPI for the commands that need MPI but no Kokkos or topology (tokenize, export, import): MPI up
// with errors returned rather than fatal (base/mpi_check.hpp turns them into messages), the log
// told its rank, and MPI_Finalize however the command ends.
#pragma once

#include <mpi.h>

#include "base/mpi_check.hpp"
#include "src/log.hpp"

namespace tptrain::driver {

class MpiSession {
 public:
  MpiSession() {
    int argc = 0;
    char** argv = nullptr;
    TPTRAIN_MPI_CHECK(MPI_Init(&argc, &argv));
    TPTRAIN_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    TPTRAIN_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    TPTRAIN_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    log::set_rank(rank);
  }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank = 0;
  int size = 1;
};

}  // namespace tptrain::driver
