// MPI for the commands that need MPI but no Kokkos or topology (tokenize, export, import): MPI up
// with errors returned rather than fatal (base/mpi_check.hpp turns them into messages), the log
// told its rank, and MPI_Finalize however the command ends.
#pragma once

#include <mpi.h>

#include <utility>

#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "src/util/log.hpp"

namespace tptrain::driver {

class MpiSession {
 public:
  // `threads`: the MPI thread level asked for. The commands that train ask for
  // MPI_THREAD_MULTIPLE: an asynchronous checkpoint's thread writes through MPI-IO while the
  // main thread's collectives go on (src/checkpoint/checkpoint_writer.hpp reads what was given).
  explicit MpiSession(int threads = MPI_THREAD_SINGLE) {
    int argc = 0;
    char** argv = nullptr;
    int provided = MPI_THREAD_SINGLE;
    TPTRAIN_MPI_CHECK(MPI_Init_thread(&argc, &argv, threads, &provided));
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

// The one rule for every command's failures: a failure all ranks agreed on (parallel::AgreedError)
// is reported once, by rank 0, after `on_agreed_failure` (its clean-up), and the command returns
// 1; any other failure is one rank's while the others may wait in a collective, so it ends the
// job (parallel::abort_job). Returns what `job` returns.
template <class Job, class OnAgreedFailure>
int with_agreed_failures(Job&& job, OnAgreedFailure&& on_agreed_failure) {
  try {
    return job();
  } catch (const parallel::AgreedError& e) {
    if (log::rank() == 0) {
      log::error(e.what());
      on_agreed_failure();
    }
    return 1;
  } catch (const std::exception& e) {
    parallel::abort_job(e.what());
  }
}
template <class Job>
int with_agreed_failures(Job&& job) {
  return with_agreed_failures(std::forward<Job>(job), [] {});
}

}  // namespace tptrain::driver
