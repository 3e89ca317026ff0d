// The straggler report's figures (src/train/straggler_report.hpp): the slowest rank and the
// median of the ranks' step times, against a sort by hand; one rank has no straggler.
#include "src/train/straggler_report.hpp"

#include <mpi.h>

#include "catch.hpp"

using tptrain::train::StepTimes;
using tptrain::train::StragglerReport;

TEST_CASE("straggler report: the slowest rank and the median", "[train]") {
  const StepTimes odd = StragglerReport::of({0.10, 0.30, 0.12});
  CHECK(odd.max_rank == 1);
  CHECK(odd.max_s == 0.30);
  CHECK(odd.median_s == 0.12);
  const StepTimes even = StragglerReport::of({0.10, 0.11, 0.50, 0.12});
  CHECK(even.max_rank == 2);
  CHECK(even.median_s == Approx(0.115));
  CHECK(StragglerReport::of({0.2}).max_rank == 0);
  // On one rank (MPI_COMM_SELF) nobody is a straggler, however long the run.
  StragglerReport self(MPI_COMM_SELF, 1.5, 1, -1);
  const StepTimes t = self.gather(0.25);
  CHECK(t.max_s == 0.25);
  CHECK(t.median_s == 0.25);
  for (int i = 0; i < 5; ++i) CHECK(self.warning(t).empty());
  CHECK_THAT(self.where(0), Catch::Matchers::Contains("host "));
}
