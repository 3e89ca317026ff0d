// `tptrain inspect FILE`: a checkpoint described for people, without MPI (what
// io::survey_checkpoint reads, io/checkpoint_survey.hpp).
//
// Prints the root attributes (format, format_version, step, tokens_seen, the layout tp x pp x
// dp, the deck's size and first lines, and any other root attribute), the attributes of /train
// and /optimizer, then every dataset of the file (recursively, in natural name order:
// layers/2 before layers/10) with its shape, type, L2 norm, min, max and whether its checksum
// attribute (checkpoint_file.hpp) verifies. Datasets are read in blocks of rows of at most
// 1 Mi elements, never whole. Output looks like
//
//   checkpoint runs/x/step_00000020.h5 (498.4 KiB)
//     format       tptrain-checkpoint, format_version 1
//     step         20
//     tokens_seen  1280
//     layout       tp 2, pp 1, dp 1 (at save time)
//     deck         734 bytes, 48 lines (first 12):
//       | [model]
//       ...
//   /train
//     seed         1234
//   /optimizer
//     step         20
//   datasets: 84, 102,528 elements
//     name                      shape      dtype     l2_norm         min        max  checksum
//     model/embedding/position  [16, 32]   float32  0.330885  -0.0377522   0.040268  ok
//     ...
//   OK: 84 datasets, every checksum verifies
//
// Returns the exit code: 0 when the file is a tptrain checkpoint of a supported format_version
// whose datasets all carry a checksum that verifies; 1 otherwise (missing file, not HDF5,
// unreadable, not a tptrain checkpoint, a missing or mismatching checksum). Problems that stop
// the inspection go to `err` as one line without a prefix ("no such file: x.h5"); problems
// with single datasets are reported in the table and in the final verdict line on `out`.
#pragma once

#include <ostream>
#include <string>

#include "io/checkpoint_survey.hpp"

namespace tptrain::driver {

// With `expected`, a dataset missing from the file, an extra one, or one of another shape is a
// problem too (exit 1).
int inspect_checkpoint(const std::string& path, std::ostream& out, std::ostream& err,
                       const io::ExpectedDatasets& expected = nullptr);

}  // namespace tptrain::driver
