// The straggler report (training.straggler_factor, training.straggler_intervals): which rank is
// slowest, once per log interval. In synchronous training every rank's wall time per step is the
// same (the collectives wait for the slowest), so a rank's step time here is its own work: the
// interval's wall time less the time its host spent blocked waiting for other ranks
// (util::CommunicationClock, src/util/host_waits.hpp), per step. The slowest rank waits least.
//
// One MPI_Allgather of one double per rank per log interval, on the host: every rank gets the
// same figures. A rank above factor × the median for `intervals` log intervals in a row gets a
// warning naming its world rank, host and GPU (gathered once, at construction).
//
// On NCCL the device, not the host, waits for the peers, so the host sees no waits and every
// rank's step time is the wall time: the report then names no straggler (docs/design.md,
// "Straggler report").
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tptrain::train {

struct StepTimes {
  int max_rank = 0;      // world rank of the slowest
  double max_s = 0;      // its step time, seconds
  double median_s = 0;   // the median over the ranks (the mean of the middle two for an even count)
};

class StragglerReport {
 public:
  // Collective over `world`: gathers every rank's host name and `gpu`, the device this rank
  // drives (-1: none).
  StragglerReport(MPI_Comm world, double factor, int intervals, int gpu);

  // Collective over `world`: this rank's step time (seconds of its own work per step in the
  // interval) against every rank's.
  StepTimes gather(double step_s);
  // After gather: "" or the warning that the slowest rank has been above factor × median for
  // `intervals` intervals in a row (said once per such run, again after it ends).
  std::string warning(const StepTimes& t);

  // "host n0042, GPU 3" / "host n0042, no GPU" of a world rank.
  std::string where(int rank) const;
  // The median and the slowest of `times` (rank order), a pure function for the tests.
  static StepTimes of(const std::vector<double>& times);

 private:
  MPI_Comm world_;
  double factor_;
  int intervals_;
  std::vector<std::string> hosts_;
  std::vector<int> gpus_;
  int slow_rank_ = -1;   // the rank slow in the current run of intervals
  int slow_count_ = 0;
  bool warned_ = false;
};

}  // namespace tptrain::train
