// What a checkpoint file holds, read for people without MPI (the file is opened with HDF5's
// default, serial file access, so no MPI_Init is needed even in a parallel build): the root
// attributes, the attributes of /train and /optimizer, every dataset (recursively, in natural
// name order: layers/2 before layers/10) with its shape, type, L2 norm, min, max and whether its
// checksum attribute (checkpoint_file.hpp) verifies, and every problem a load would refuse the
// file for. Datasets are read in blocks of rows of at most 1 Mi elements, never whole.
// `tptrain inspect` (src/driver/inspect.hpp) prints it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint_file.hpp"

namespace tptrain::io {

// Every dataset (name -> shape) a checkpoint must hold, given the text of its deck attribute;
// throws when the deck does not describe a model. This layer does not know the model: the
// caller (the driver, from the model's list of tensors) does.
using ExpectedDatasets =
    std::function<std::map<std::string, std::vector<std::uint64_t>>(const std::string& deck)>;

// Whether a dataset's checksum attribute verifies.
enum class ChecksumCheck { ok, mismatch, missing, not_float, not_float32, unreadable };

struct DatasetSurvey {
  std::string name, shape, dtype;
  std::uint64_t elements = 0;
  bool numeric = false;  // statistics computed
  double sum_squares = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  std::uint64_t nans = 0;
  ChecksumCheck check = ChecksumCheck::unreadable;
  std::uint64_t stored = 0, computed = 0;  // the checksums, when both are known
  std::string error;                       // why the dataset is unreadable

  // The verdict for people: "ok", "MISMATCH (stored …, computed …)", "MISSING (…)", ….
  std::string check_text() const;
  bool fails() const { return check != ChecksumCheck::ok; }
};

// A root attribute described for people (its value; "(missing)" or "(unreadable: why)").
struct AttributeSurvey {
  bool exists = false;
  std::string text;
};

// The attributes of a group, each described for people, unless the group is absent or cannot
// be read.
struct GroupSurvey {
  enum State { present, absent, unreadable };
  State state = absent;
  std::string error;  // unreadable: why
  std::vector<std::pair<std::string, std::string>> attributes;  // name, description
};

struct CheckpointSurvey {
  std::optional<std::uintmax_t> bytes;  // the file's size, when the file system tells
  CheckpointMeta meta;                  // what the root attributes hold
  bool is_checkpoint = false;           // the root says it is a tptrain checkpoint
  bool deck_read = false;               // meta.deck holds the deck attribute
  // format, format_version, step, tokens_seen, tp, pp, dp, precision, deck
  std::map<std::string, AttributeSurvey> root;
  GroupSurvey train, optimizer;
  // The datasets could not be listed ("cannot list the datasets of …"): nothing below is filled.
  std::string list_error;
  std::vector<DatasetSurvey> datasets;  // natural name order
  std::uint64_t elements = 0;           // over every dataset
  // Every problem a load (or, with `expected`, the model of the checkpoint's deck) would refuse
  // the file for, besides the failing datasets: the schema's, datasets missing, extra or
  // reshaped, non-finite values, the file's structure.
  std::vector<std::string> problems;
};

// Throws std::runtime_error, one line for people, when the file cannot be opened at all
// ("no such file: x.h5", "cannot open x.h5: …; the file is truncated or corrupt").
CheckpointSurvey survey_checkpoint(const std::string& path, const ExpectedDatasets& expected = nullptr);

}  // namespace tptrain::io
