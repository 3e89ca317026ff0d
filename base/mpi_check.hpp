// Check macros for MPI (and NCCL/CUDA) calls: a failing call is reported with the call, the
// file:line and the world rank, then the whole job is aborted so no other rank waits forever
// in a collective that will never complete. Failures that are not MPI's own (a file, a shape)
// are agreed on instead: see agreement.hpp.
#pragma once

#include <mpi.h>
#include <string>

namespace tptrain::parallel {

// Prints "tptrain: rank R: <what> failed at file:line: <reason>" and calls MPI_Abort.
[[noreturn]] void abort_job(const char* what, const char* file, int line, const std::string& reason);

std::string mpi_error_string(int code);

}  // namespace tptrain::parallel

#define TPTRAIN_MPI_CHECK(call)                                                                \
  do {                                                                                         \
    const int tptrain_mpi_rc_ = (call);                                                        \
    if (tptrain_mpi_rc_ != MPI_SUCCESS)                                                        \
      ::tptrain::parallel::abort_job(#call, __FILE__, __LINE__,                                \
                                     ::tptrain::parallel::mpi_error_string(tptrain_mpi_rc_));  \
  } while (0)
