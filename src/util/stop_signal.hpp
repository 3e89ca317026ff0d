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

// From now on SIGUSR1 and SIGTERM are recorded instead of ending the process, until
// restore_stop_signals(); they are unblocked in the calling thread, so one that was blocked and
// pending (the tptrain launcher blocks them, src/driver/stop_signal_launcher.c) is recorded now.
// Only sigaction and sigprocmask: async-signal-safe and free of allocation, so the program calls
// it before any library is initialised (src/driver/main.cpp) and a signal that comes while the
// job starts stops the run after its first step. Calling it again is harmless (it installs the
// handlers again, in case anything replaced them). false when sigaction fails.
// A recorded signal also makes stdout and stderr non-blocking when they are a pipe, FIFO,
// socket or terminal: the launcher may have stopped reading them (Open MPI's mpiexec that was
// signalled itself), and a rank blocked in a write to a full pty would never reach its
// checkpoint. Output that cannot be written at once is dropped from then on.
bool record_stop_signals() noexcept;

// Gives stdout and stderr their file status flags back at exit (they belong to an open file
// description a terminal shares with the shell). Called from main, once the C library is up.
void restore_output_flags_at_exit();

// The actions from before record_stop_signals() again, and stdout's and stderr's flags. Returns the signal recorded so far (0 if
// none) and forgets it: a command that has nothing to save raises it again, so that it takes
// effect as if it had never been recorded.
int restore_stop_signals() noexcept;

// The last stop signal recorded (SIGUSR1 or SIGTERM), 0 if none.
int stop_signal_received();

// "SIGUSR1", "SIGTERM", else "signal N".
std::string signal_name(int signal);

}  // namespace tptrain::util
