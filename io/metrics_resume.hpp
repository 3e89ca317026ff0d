// What a resumed run keeps of <run.dir>/metrics.jsonl (docs/design.md, "Run outputs"): the
// records up to the step it resumes from. A run killed after its last checkpoint logged steps
// that the resumed run trains and logs again, and a run killed in the middle of a write leaves
// its last line cut; both are dropped. Anything else that is not a record is an error naming
// the file and the line: a resumed run never guesses which records are right.
#pragma once

#include <cstdint>
#include <istream>
#include <string>

namespace tptrain::io {

struct MetricsPrefix {
  std::uint64_t bytes = 0;         // keep the first `bytes` bytes: the records of steps <= the resumed step
  bool add_newline = false;        // the last kept record is complete but lost its newline
  std::int64_t last_step = 0;     // step of the last kept record, 0 if none
  std::int64_t later_records = 0;  // complete records of later steps, dropped
  std::int64_t cut_line = 0;       // number of the cut last line that was dropped, 0 if none
  std::string cut_text;            // that line, printable and shortened, for the notice
};

// Reads `in` (the file `name`, for messages) to its end. A record line starts with
// {"step": N, where N is a whole number from 1 to 2^63 - 1 that is larger than the previous
// line's, and ends with }. The last line may be a cut record (it does not end with }, and
// what there is of it starts like a record): it is dropped. Throws std::runtime_error
// "<name>:<line>: ..." for any other line.
MetricsPrefix metrics_prefix(std::istream& in, const std::string& name, std::int64_t resumed_step);

}  // namespace tptrain::io
