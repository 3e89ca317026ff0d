// A time limit on reading a checkpoint's metadata. Some corruptions of an HDF5 file make
// libhdf5 itself loop (a global-heap collection whose free-space entry has size 0 is walked
// forever when a variable-length string is read); no check before the call can see that. So a
// watchdog thread bounds the phases that only read metadata: when one does not finish in time
// it prints
//
//   tptrain: reading runs/x/ck/step_00000020.h5 did not finish in 120 s: the file's metadata is
//   corrupt (or its file system stopped answering)
//
// and ends the process with exit status 1 (_exit: the stuck thread holds HDF5's locks, so no
// clean shutdown is possible; under mpiexec the launcher then ends the other ranks).
//
// The limit is kDefaultSeconds, or what set_configured_seconds made it: the driver passes the
// deck's checkpoint.metadata_timeout_s once, after reading the deck (src/driver/commands.cpp;
// commands without a deck, inspect and export, keep the default). kick() restarts the clock,
// for readers that make progress in bounded steps.
//
// Other corruptions make libhdf5 read out of bounds (a variable-length string whose global-heap
// length is damaged is memcpy'd past its buffer): no check before the call sees that either. So
// while a watchdog lives, SIGSEGV and SIGBUS end the process the same way, with
//
//   tptrain: error: reading runs/x/ck/step_00000020.h5 crashed inside libhdf5 (signal 11): the
//   file's metadata is corrupt
//
// instead of a core dump; the previous handlers (e.g. the MPI library's) are restored after.
#pragma once

#include <csignal>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace tptrain::io {

class ReadWatchdog {
 public:
  static constexpr double kDefaultSeconds = 120;

  // Starts the clock for reading `path`; seconds <= 0 means configured_seconds().
  explicit ReadWatchdog(const std::string& path, double seconds = 0);
  ~ReadWatchdog();
  ReadWatchdog(const ReadWatchdog&) = delete;
  ReadWatchdog& operator=(const ReadWatchdog&) = delete;

  void kick();
  double seconds() const { return seconds_; }

  // The limit of the watchdogs made from now on: kDefaultSeconds until set (seconds > 0, else
  // std::invalid_argument; the deck has checked the key). Process-wide: one deck per process.
  static double configured_seconds();
  static void set_configured_seconds(double seconds);

 private:
  void watch();

  std::string path_;
  double seconds_;
  struct sigaction previous_segv_ {}, previous_bus_ {};
  bool guarding_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

}  // namespace tptrain::io
