// A multiple-choice task file (`tptrain eval --tasks`, training.tasks): JSON Lines, one example
// a line, {"context": "...", "endings": ["...", ...], "label": k}: HellaSwag's shape as llm.c's
// and lm-evaluation-harness's loaders produce it. Other members of a line (HellaSwag's "ind",
// "activity_label", ...) are ignored. Scoring is src/driver/multiple_choice.hpp's; this is the
// file format only. JSON is parsed here, in host-only io/ (nlohmann-json), never in a header.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tptrain::io {

struct MultipleChoiceExample {
  std::string context;
  std::vector<std::string> endings;  // at least one, none empty
  int label = 0;                     // the right ending, in [0, endings.size())
  std::int64_t line = 0;             // 1-based line of the file, for messages
};

// The examples of `text`, named `name` in messages. Blank lines are skipped. Throws
// std::runtime_error "<name>:<line>: <what>" for the first bad line: not JSON, not an object, no
// "context" or one that is not a string, no "endings" or one that is not a non-empty list of
// non-empty strings, no "label" or one that is not an integer in [0, number of endings); and
// "<name>: no examples" for a file without any.
std::vector<MultipleChoiceExample> parse_multiple_choice_tasks(std::string_view text, const std::string& name);

// The same for the file at `path` (a regular, readable file: std::runtime_error naming it otherwise).
std::vector<MultipleChoiceExample> read_multiple_choice_tasks(const std::string& path);

}  // namespace tptrain::io
