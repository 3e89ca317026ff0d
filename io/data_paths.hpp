// What a data.train / data.valid value names: one token file, every token file of a folder, or
// the files a glob pattern matches (docs/design.md, "Datasets"). Used by the deck checks and by
// the dataset itself, so both see the same list in the same order.
//
//   a folder     every file whose name ends in .bin or .txt (any case) and does not start with
//                '.' (subfolders are skipped); a folder that mixes a validation split with other
//                files is refused: training on it would train on the validation shards too. A
//                validation file is one with a word (a run of letters, any case) val, valid,
//                validation, eval, test, dev or heldout in its name: tptrain tokenize's
//                valid_*.bin, llm.c's fineweb_val_*.bin, VALID.bin.
//   a pattern    a value that names nothing that exists and holds *, ? or [ is a glob(3)
//                pattern; every match is kept, whatever its name (the dataset refuses one that
//                is not a token file, by name).
//   else         the value itself, one file.
// The list is sorted by name in byte order (not the locale's collation): the same order on every
// rank and machine, which the dataset's token order and the sampler depend on.
#pragma once

#include <string>
#include <vector>

namespace tptrain::io {

struct DataPaths {
  enum class Form { file, folder, pattern };
  Form form = Form::file;
  std::vector<std::string> files;  // at least one when problem is empty
  // "" or why the value names no file, to follow the value in a sentence: "matches no file",
  // "is a folder with no .bin or .txt file in it", ...
  std::string problem;
  bool absent = false;  // the problem is only that nothing by that name exists (yet)
};

// Whether `value` is read as a glob pattern: it names nothing that exists and holds *, ? or [.
bool is_data_pattern(const std::string& value);

DataPaths expand_data_paths(const std::string& value);

// How a DataPaths form is named in messages: "file", "folder", "pattern".
const char* form_name(DataPaths::Form form);

}  // namespace tptrain::io
