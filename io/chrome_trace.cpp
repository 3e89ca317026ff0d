#include "io/chrome_trace.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>

#include "io/json_line.hpp"

namespace tptrain::io {

std::string ChromeTrace::json() const {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
  bool first = true;
  const auto add = [&](const JsonObject& o) {
    out += first ? "\n" : ",\n";
    out += o.text();
    first = false;
  };
  std::set<int> ranks;
  for (const TraceSpan& s : spans_) ranks.insert(s.rank);
  for (const TraceTrack& t : tracks_) ranks.insert(t.rank);
  for (int r : ranks)
    add(JsonObject()
            .string("name", "process_name")
            .string("ph", "M")
            .integer("pid", r)
            .integer("tid", 0)
            .object("args", JsonObject().string("name", "rank " + std::to_string(r))));
  for (const TraceTrack& t : tracks_)
    add(JsonObject()
            .string("name", "thread_name")
            .string("ph", "M")
            .integer("pid", t.rank)
            .integer("tid", t.stream)
            .object("args", JsonObject().string("name", t.name)));
  for (const TraceSpan& s : spans_)
    add(JsonObject()
            .string("name", s.name)
            .string("cat", s.category)
            .string("ph", "X")
            .integer("pid", s.rank)
            .integer("tid", s.stream)
            .number("ts", s.start_us, fixed(3))
            .number("dur", s.duration_us, fixed(3)));
  out += "\n]}\n";
  return out;
}

void ChromeTrace::write(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("tptrain: cannot write the trace " + path + ": " + std::strerror(errno));
  const std::string text = json();
  f.write(text.data(), std::streamsize(text.size()));
  f.close();
  if (!f) throw std::runtime_error("tptrain: writing the trace " + path + " failed (disk full?)");
}

}  // namespace tptrain::io
