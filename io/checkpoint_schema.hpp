// The checkpoint schema (docs/checkpoints.md) checked on an open file: the one set of rules that
// read_checkpoint (load, eval, generate) and tptrain inspect apply. Checks report problems as
// sentences ("the checkpoint has no step attribute", "model/x: checkpoint holds integer data,
// expected float32") and keep going, so that inspect can list every problem; a failed HDF5 call
// on a damaged file becomes a problem too, with HDF5's reason.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/checkpoint_file.hpp"
#include "io/hdf5_check.hpp"
#include "io/read_watchdog.hpp"

namespace tptrain::io::detail {

inline constexpr char kFormat[] = "tptrain-checkpoint";
// Written: 2 (with the metadata checksum). Read: 2, and 1 (before the metadata checksum).
inline constexpr std::int64_t kFormatVersion = 2;
inline constexpr std::int64_t kOldestFormatVersion = 1;

// Root attributes (format, format_version, step, tokens_seen, tp, pp, dp, deck), the group
// /train with its integer attributes and, when present, /train/blend (io/checkpoint_blend.hpp).
// A missing or foreign format stops the checks there (the file is not a tptrain checkpoint; the
// rest would only be noise). Returns what could be read.
CheckpointMeta check_root(hid_t file, std::vector<std::string>& problems);

// Opens dataset `name` and checks that it is a float32 dataset (with shape *want_shape when
// given). Each parent must be a group. Problems are added to `problems` and yield an invalid
// handle. `groups` caches the parents already checked.
h5::Handle open_dataset_checked(hid_t file, const std::string& name,
                                const std::vector<std::uint64_t>* want_shape,
                                std::set<std::string>& groups, std::vector<std::string>& problems);

// The dataset's stored checksum (kChecksumAttribute, an unsigned integer), or a problem.
std::optional<std::uint64_t> stored_checksum(hid_t dset, const std::string& name,
                                             std::vector<std::string>& problems);

// /optimizer must carry an integer step equal to the checkpoint's.
void check_optimizer_step(hid_t file, std::int64_t step, std::vector<std::string>& problems);

// A tensor under /optimizer (whose group then carries the step attribute)?
bool under_optimizer(const std::string& name);

// Every dataset below `group` (paths relative to the root, no leading slash), kicking
// `watchdog` (may be null) per link. Links that cannot be followed, groups seen before (a damaged
// file can link a group into itself) and names or counts beyond sane bounds are reported in
// `notes`: each is damage the verdict must show.
void collect_datasets(hid_t group, const std::string& prefix, int depth,
                      std::vector<std::string>& datasets, std::vector<std::string>& notes,
                      std::set<haddr_t>& visited, ReadWatchdog* watchdog, h5::Status& st);

// One problem as is; several as "N problems with the checkpoint:" and one per line (at most 10).
std::string list_problems(const std::vector<std::string>& problems);

}  // namespace tptrain::io::detail
