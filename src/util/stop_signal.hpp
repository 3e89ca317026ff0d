// The clean stop of a training job (docs/design.md, "Stopping and requeueing"). A batch system
// announces the end of a job's time with a signal: Slurm's `--signal=B:USR1@<seconds>` (the job
// script forwards it to the ranks, jobs/slurm/) or SIGTERM at the time limit, with SIGKILL
// following. tptrain train then finishes the current step, writes a checkpoint on every rank and
// exits with kRequeueExitStatus, which the job script turns into `scontrol requeue`.
//
// The handler only records the signal: nothing else is async-signal-safe (no MPI, no I/O, no
// allocation). The training loop reads the record after each step and agrees with the other
// ranks on stopping (parallel::agree_on_stop_signal), because a signal reaches the ranks at
// different moments.
#pragma once

#include <string>

namespace tptrain::util {

// "Stopped early on request; checkpoint written; run me again with checkpoint.resume": the exit
// status the Slurm scripts requeue on. 1 and 2 are failures and usage errors.
inline constexpr int kRequeueExitStatus = 3;

// While an object lives, SIGUSR1 and SIGTERM are recorded instead of ending the process (the
// previous actions are restored by the destructor). Only `tptrain train` installs it: eval,
// generate and bench have nothing to save, and SIGTERM ends them as usual. One at a time.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

// The last stop signal received while StopSignals lives (SIGUSR1 or SIGTERM), 0 if none.
int stop_signal_received();

// "SIGUSR1", "SIGTERM", else "signal N".
std::string signal_name(int signal);

}  // namespace tptrain::util
