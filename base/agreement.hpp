// Agreement on failure across ranks: the one rule that keeps a job from hanging.
//
// A rank that fails (an exception: a file it cannot open, a bad shape, an allocation) and then
// skips a collective leaves every other rank waiting in it forever. So work that can fail on
// some ranks only is done in phases, and every phase ends in agree_on_error(): one MPI_Allreduce
// tells every rank whether any rank failed, and the message of the lowest failing rank is
// broadcast, so all ranks throw the same AgreedError and rank 0 can report it once.
//
// The rule for callers: between two agreements, a rank may throw only where no collective call
// follows before the agreement (a phase is "local work, then agree"). Collectives belong after
// the agreement, in the next phase.
//
// Failures of MPI calls themselves are not agreed on (the communicator may be unusable): every
// MPI call goes through TPTRAIN_MPI_CHECK (mpi_check.hpp), which ends the whole job.
#pragma once

#include <mpi.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace tptrain::parallel {

// The same failure, seen by every rank of a communicator. what() is the message of the lowest
// failing rank, followed by " [rank r]" when that rank is not rank 0 of the communicator.
class AgreedError : public std::runtime_error {
 public:
  using runtime_error::runtime_error;
};

// Collective over comm. "" when every rank passed an empty `local_error`; otherwise, on every
// rank, the message of the lowest failing rank (tagged " [rank r]" when r != 0).
std::string agree_on_error(MPI_Comm comm, const std::string& local_error);

// Collective over comm: whether the job was asked to stop (util/stop_signal.hpp), the same answer
// on every rank: 0 when `local_signal` is 0 everywhere, else the largest signal number any rank
// received. A signal reaches the ranks at different moments (one rank sees it before a step's
// last collective, another after), so the training loop asks after every step and all ranks
// stop after the same one.
int agree_on_stop_signal(MPI_Comm comm, int local_signal);

// Runs f() on this rank, catching any std::exception, then agrees (collective over comm):
// returns normally on every rank when f succeeded everywhere, else throws AgreedError on every
// rank. An AgreedError thrown inside f (a nested agreement over the same ranks) keeps its
// message.
template <class F>
void on_every_rank(MPI_Comm comm, F&& f) {
  std::string problem;
  try {
    f();
  } catch (const std::exception& e) {
    problem = e.what();
    if (problem.empty()) problem = "unknown error";
  }
  if (std::string m = agree_on_error(comm, problem); !m.empty()) throw AgreedError(m);
}

}  // namespace tptrain::parallel
