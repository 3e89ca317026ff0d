// Ending the whole job from one rank, and the check macro for MPI (and NCCL/CUDA) calls: a
// failing call is reported with its name, the library's reason and the world rank, then the whole
// job is aborted so that no other rank waits forever in a collective that will never complete.
// Failures that are not MPI's own (a file, a shape) are agreed on instead: see agreement.hpp.
#pragma once

#include <mpi.h>
#include <string>

namespace tptrain::parallel {

// A failure seen on this rank only, while the others may be inside a collective: prints
// "tptrain: error (rank R): <message>; ending the job" and calls MPI_Abort.
[[noreturn]] void abort_job(const std::string& message);

// A failed MPI, NCCL or CUDA call: "tptrain: error (rank R): <call name> failed: <reason> (call
// at <file>:<line>); ending the job". The reason comes first; the call site stays because such a
// failure is a broken network or peer, or a wrong call (an internal bug), and then it is what a
// bug report needs.
[[noreturn]] void abort_job(const char* call, const char* file, int line, const std::string& reason);

std::string mpi_error_string(int code);

}  // namespace tptrain::parallel

#define TPTRAIN_MPI_CHECK(call)                                                                \
  do {                                                                                         \
    const int tptrain_mpi_rc_ = (call);                                                        \
    if (tptrain_mpi_rc_ != MPI_SUCCESS)                                                        \
      ::tptrain::parallel::abort_job(#call, __FILE__, __LINE__,                                \
                                     ::tptrain::parallel::mpi_error_string(tptrain_mpi_rc_));  \
  } while (0)
