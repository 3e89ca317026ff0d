// data.train as a checkpoint records it, in the group /train/blend (docs/checkpoints.md): each
// entry's path, size and weight, and how many of the sequences of steps [0, step) came from it.
// A resume compares its deck's blend with it (src/data/blend_resume.hpp), and data_share and
// data_epochs continue from its counts instead of being counted again under the new deck.
//
//   group /train/blend  sequences (int64): the sequences of steps [0, step), from every entry,
//                         also from entries that a resume with a changed blend left out;
//                       per entry i = 0 .. n-1 (n >= 1: the path_<i> that there are):
//                         path_<i> (UTF-8 string): the path as the deck resolves it,
//                         tokens_<i> (int64): the dataset's size in tokens,
//                         weight_<i> (float64): its weight as the deck writes it,
//                         drawn_<i> (int64): the sequences of steps [0, step) drawn from it.
// Scalar attributes opened by name, as the rest of the metadata (io/hdf5_attributes.hpp), and
// sealed by the metadata checksum (io/checkpoint_file.hpp). Checkpoints written before the
// record have no such group: an empty BlendRecord.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/hdf5_check.hpp"

namespace tptrain::io {

struct BlendEntryRecord {
  std::string path;
  std::int64_t tokens = 0;
  double weight = 1.0;
  std::int64_t drawn = 0;
  friend bool operator==(const BlendEntryRecord& a, const BlendEntryRecord& b) {
    return a.path == b.path && a.tokens == b.tokens && a.weight == b.weight && a.drawn == b.drawn;
  }
};

struct BlendRecord {
  std::vector<BlendEntryRecord> entries;  // empty: not recorded
  std::int64_t sequences = 0;
  bool empty() const { return entries.empty(); }
  friend bool operator==(const BlendRecord& a, const BlendRecord& b) {
    return a.entries == b.entries && a.sequences == b.sequences;
  }
};

namespace detail {

// The most entries a checkpoint's record is read with (a bound against a damaged count).
inline constexpr std::int64_t kMaxBlendEntries = std::int64_t{1} << 16;

// The group "blend" under `train` (/train) with the record's attributes; nothing for an empty
// record.
void write_blend(hid_t train, const BlendRecord& blend, h5::Status& st);

// /train/blend of the group `train`, if there is one: entries 0, 1, ... while there is a
// path_<i>. An attribute of an entry missing or out of range becomes a problem ("attribute
// /train/blend/weight_1 = -2: expected a finite weight > 0"), and the record is then empty.
BlendRecord read_blend(hid_t train, std::vector<std::string>& problems);

// The attributes of a record as the metadata checksum seals them: {name, value as text} in
// the order sequences, then path_i, tokens_i, weight_i, drawn_i for each i (values exact:
// integers in decimal, paths as they are, a weight as its IEEE double's 64 bits in 16
// lower-case hex digits, 1.0 = 3ff0000000000000).
std::vector<std::pair<std::string, std::string>> blend_attribute_texts(const BlendRecord& blend);

}  // namespace detail
}  // namespace tptrain::io
