#include "io/metrics_resume.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <stdexcept>
#include <string_view>

#include "io/path_text.hpp"

namespace tptrain::io {

namespace {

constexpr std::string_view kRecordStart = "{\"step\": ";

// A line as it can be shown in a message: control characters escaped, at most 60 characters.
std::string shown(std::string_view line) {
  const bool longer = line.size() > 60;
  return "'" + display_path(std::string(line.substr(0, 60))) + (longer ? "...'" : "'");
}

// What is left of a record whose write was cut short: its end is missing, and its start is
// (a prefix of) the start of every record.
bool cut_record(std::string_view line) {
  if (!line.empty() && line.back() == '}') return false;
  const std::size_t n = std::min(line.size(), kRecordStart.size());
  return line.substr(0, n) == kRecordStart.substr(0, n);
}

}  // namespace

MetricsPrefix metrics_prefix(std::istream& in, const std::string& name, std::int64_t resumed_step) {
  const auto bad_line = [&](std::int64_t number, const std::string& why) {
    return std::runtime_error(fmt::format("{}:{}: {}; a resumed run continues this file: repair or delete "
                                          "that line, or move the file away, and run again",
                                          display_path(name), number, why));
  };
  MetricsPrefix kept;
  std::uint64_t offset = 0;  // bytes before the current line
  std::int64_t number = 0, previous_step = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++number;
    const bool terminated = !in.eof();
    const std::uint64_t next = offset + line.size() + (terminated ? 1 : 0);
    if (in.peek() == std::char_traits<char>::eof() && cut_record(line)) {  // the last line, cut
      kept.cut_line = number;
      kept.cut_text = shown(line);
      break;
    }
    if (line.rfind(kRecordStart, 0) != 0 || line.back() != '}')
      throw bad_line(number, fmt::format("not a metrics record (expected {{\"step\": N, ...}}): {}", shown(line)));
    // The line ends with '}', so the step ends at a ',' or at that '}'.
    const std::string_view rest = std::string_view(line).substr(kRecordStart.size());
    const std::string_view text = rest.substr(0, rest.find_first_of(",}"));
    std::int64_t step = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), step);
    if (ec != std::errc() || end != text.data() + text.size() || step < 1)
      throw bad_line(number, fmt::format("the step {} is not a whole number from 1 to {}", shown(text),
                                         std::numeric_limits<std::int64_t>::max()));
    if (step <= previous_step)
      throw bad_line(number, fmt::format("step {} follows step {} (the records are in step order)", step, previous_step));
    previous_step = step;
    if (step <= resumed_step) {  // in step order, so the kept records are a prefix of the file
      kept.bytes = next;
      kept.add_newline = !terminated;
      kept.last_step = step;
    } else {
      ++kept.later_records;
    }
    offset = next;
  }
  if (in.bad()) throw std::runtime_error(fmt::format("{}: cannot be read", display_path(name)));
  return kept;
}

}  // namespace tptrain::io
