// One run per output directory. Two runs writing the same run.dir / checkpoint.dir overwrite
// each other's checkpoints (and each other's .tmp files mid-write) and interleave
// metrics.jsonl; so world rank 0 holds an exclusive lock on each directory for the whole run.
//
// The lock is <dir>/tptrain.lock: an flock(2)-locked file holding the owner's host, pid and
// start time. flock is released by the kernel when the owner dies, however it dies (SIGKILL,
// node reboot on a local disk), so a lock left behind by a dead run is detected as stale,
// reported, and taken over; a live owner makes the new run stop with a message naming it.
// On file systems without flock (some NFS mounts), the host and pid in the file decide: a pid
// that no longer exists on this host is stale; an owner on another host is taken as alive.
#pragma once

#include <string>
#include <vector>

namespace tptrain::io {

class RunLock {
 public:
  // Locks each distinct directory of `dirs` (created if missing). Throws std::runtime_error
  // naming the directory and the owner ("in use by tptrain pid 1234 on host n01 since ...").
  // `warn` receives the notice when a stale lock is taken over.
  RunLock(const std::vector<std::string>& dirs, void (*warn)(const std::string&));
  ~RunLock();  // releases and removes the lock files
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  static constexpr const char* kFileName = "tptrain.lock";

 private:
  struct Held {
    std::string path;
    int fd;
  };
  void release();
  std::vector<Held> held_;
};

}  // namespace tptrain::io
