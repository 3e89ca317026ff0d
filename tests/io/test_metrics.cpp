// metrics.jsonl: its records (the fixed fields, then the caller's integer fields in order), the
// checked writes and what a resumed run keeps of the file.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "io/metrics.hpp"
#include "io/metrics_resume.hpp"
#include "io/metrics_writer.hpp"
#include "tests/mpi_test_util.hpp"
#include "tests/test_helpers.hpp"

namespace {
tptrain::io::MetricsRecord record_of_step(std::int64_t step) {
  tptrain::io::MetricsRecord r;
  r.step = step;
  r.loss = 2.5;
  r.lr = 1e-3;
  r.grad_norm = 0.5;
  r.tokens_per_s = 1000;
  return r;
}
}  // namespace

TEST_CASE("a metrics record ends with the caller's integer fields, in order", "[io][metrics]") {
  tptrain::io::MetricsRecord r = record_of_step(3);
  CHECK(tptrain::io::to_json(r) == R"({"step": 3, "loss": 2.5, "lr": 0.001, "grad_norm": 0.5, "tokens_per_s": 1000.0})");
  r.fields = {{"mem_weights_bytes", 123456789012}, {"mem_peak_bytes", 0}, {"odd \"name\"", -1}};
  CHECK(tptrain::io::to_json(r) == R"({"step": 3, "loss": 2.5, "lr": 0.001, "grad_norm": 0.5, "tokens_per_s": 1000.0, )"
                                   R"("mem_weights_bytes": 123456789012, "mem_peak_bytes": 0, "odd \"name\"": -1})");
}

TEST_CASE("a metrics record of a multiple-choice step has mc_accuracy, mc_accuracy_norm and mc_examples",
          "[io][metrics]") {
  tptrain::io::MetricsRecord r = record_of_step(4);
  r.eval_loss = 3.0;
  r.mc = tptrain::io::MetricsRecord::MultipleChoice{0.35, 0.4, 20};
  CHECK(tptrain::io::to_json(r) == R"({"step": 4, "loss": 2.5, "lr": 0.001, "grad_norm": 0.5, "tokens_per_s": 1000.0, )"
                                   R"("eval_loss": 3, "mc_accuracy": 0.34999999999999998, "mc_accuracy_norm": )"
                                   R"(0.40000000000000002, "mc_examples": 20})");
}

// ---- resuming: what is kept of metrics.jsonl (io/metrics_resume.hpp) ------------------------

namespace {

std::string record_line(std::int64_t step) {
  return "{\"step\": " + std::to_string(step) + ", \"loss\": 2.5, \"mem_peak_bytes\": 7}\n";
}

tptrain::io::MetricsPrefix prefix_of(const std::string& text, std::int64_t resumed_step) {
  std::istringstream in(text);
  return tptrain::io::metrics_prefix(in, "run/metrics.jsonl", resumed_step);
}

std::string error_of(const std::string& text, std::int64_t resumed_step) {
  try {
    prefix_of(text, resumed_step);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a resume keeps the records up to its step and drops a cut last line", "[io][metrics]") {
  const std::string three = record_line(1) + record_line(10) + record_line(20);
  SECTION("later records are dropped: the resumed run logs them again") {
    const auto kept = prefix_of(three + record_line(30), 20);
    CHECK(kept.bytes == three.size());
    CHECK(kept.last_step == 20);
    CHECK(kept.later_records == 1);
    CHECK(kept.cut_line == 0);
    CHECK(!kept.add_newline);
  }
  SECTION("a cut last line, at any byte, is dropped and named") {
    const std::string last = record_line(30);
    for (std::size_t cut = 0; cut + 1 < last.size(); ++cut) {  // every prefix that lacks the final '}'
      INFO("cut after " << cut << " bytes: " << last.substr(0, cut));
      const auto kept = prefix_of(three + last.substr(0, cut), 20);
      if (cut == 0) {
        CHECK(kept.cut_line == 0);  // nothing of it was written
      } else {
        CHECK(kept.cut_line == 4);
        CHECK(kept.cut_text.find(last.substr(0, std::min<std::size_t>(cut, 20))) != std::string::npos);
      }
      CHECK(kept.bytes == three.size());
    }
    // The hostile pass's case: `{"step": ` and nothing more, as the last line.
    const auto kept = prefix_of(three + "{\"step\": ", 30);
    CHECK(kept.cut_line == 4);
    CHECK(kept.cut_text == "'{\"step\": '");
    CHECK(kept.last_step == 20);
  }
  SECTION("a whole last record whose newline was cut is kept, and the newline is added") {
    const auto kept = prefix_of(three + "{\"step\": 30}", 40);
    CHECK(kept.bytes == three.size() + 12);
    CHECK(kept.add_newline);
    CHECK(kept.last_step == 30);
  }
  SECTION("an empty file, or none, keeps nothing") {
    const auto kept = prefix_of("", 20);
    CHECK(kept.bytes == 0);
    CHECK(kept.last_step == 0);
  }
}

TEST_CASE("a line that is not a record stops a resume, naming the file and the line", "[io][metrics]") {
  const std::string two = record_line(1) + record_line(2);
  using tptrain::test::contains;
  // Beyond int64, as the last line or in the middle: today's std::stoll said only "stoll".
  CHECK_THAT(error_of(two + "{\"step\": 99999999999999999999, \"loss\": 1}\n", 2),
             contains("run/metrics.jsonl:3: the step '99999999999999999999' is not a whole number from 1 to "
                      "9223372036854775807"));
  CHECK_THAT(error_of(record_line(1) + "{\"step\": 99999999999999999999}\n" + record_line(3), 2),
             contains("run/metrics.jsonl:2: the step"));
  CHECK_THAT(error_of(two + "{\"step\": 0, \"loss\": 1}\n", 2), contains("run/metrics.jsonl:3: the step '0'"));
  CHECK_THAT(error_of(two + "{\"step\": -4}\n", 2), contains(":3: the step '-4'"));
  CHECK_THAT(error_of(two + "{\"step\": 3x, \"loss\": 1}\n", 2), contains(":3: the step '3x'"));
  CHECK_THAT(error_of(two + "{\"step\": \"3\"}\n", 2), contains(":3: the step"));
  // Garbage: in the middle (even a cut record there), or as a last line that is no record's start.
  CHECK_THAT(error_of(record_line(1) + "{\"step\": 2, \"lo\n" + record_line(3), 3),
             contains("run/metrics.jsonl:2: not a metrics record (expected {\"step\": N, ...}): '{\"step\": 2, \"lo'"));
  CHECK_THAT(error_of(record_line(1) + "\n" + record_line(2), 3), contains(":2: not a metrics record"));
  CHECK_THAT(error_of(two + "garbage\n", 3), contains(":3: not a metrics record (expected {\"step\": N, ...}): 'garbage'"));
  CHECK_THAT(error_of(two + "{\"loss\": 1}", 3), contains(":3: not a metrics record"));
  CHECK_THAT(error_of(two + std::string(100, 'x') + "\x1b[2J}\n", 3), contains("xxxx...'"));  // shortened
  // Order: steps grow, line after line.
  CHECK_THAT(error_of(record_line(5) + record_line(3), 5), contains(":2: step 3 follows step 5"));
  CHECK_THAT(error_of(record_line(5) + record_line(5), 5), contains(":2: step 5 follows step 5"));
  // Every message says what to do.
  CHECK_THAT(error_of(two + "garbage\n", 3), contains("repair or delete that line, or move the file away"));
}

// ---- writing: every failure is reported (io/metrics_writer.hpp) -----------------------------

namespace {

namespace fs = std::filesystem;

std::vector<std::string> g_warnings;
void remember(const std::string& w) { g_warnings.push_back(w); }

tptrain::io::MetricsRecord record_of(std::int64_t step) {
  tptrain::io::MetricsRecord r;
  r.step = step;
  r.loss = 2.5;
  r.lr = 1e-3;
  r.grad_norm = 0.5;
  r.tokens_per_s = 1000;
  return r;
}

// This rank's directory (the suite may run on several ranks at once).
std::string rank_dir(const tptrain::test::SharedTempDir& dir) {
  const std::string d = dir.file("rank" + std::to_string(tptrain::test::world_rank()));
  fs::create_directories(d);
  return d;
}

// Every line of `text` is a whole record ({...} and a newline); their steps, in order.
std::vector<std::int64_t> steps_of(const std::string& text) {
  std::vector<std::int64_t> steps;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    REQUIRE(!in.eof());
    REQUIRE(line.rfind("{\"step\": ", 0) == 0);
    REQUIRE(line.back() == '}');
    steps.push_back(std::stoll(line.substr(9)));
  }
  return steps;
}

// RLIMIT_FSIZE set to `bytes` while it lives, with SIGXFSZ ignored: a write past the limit
// fails with EFBIG, as one on a full disk fails with ENOSPC (no root, no small file system).
struct FileSizeLimit {
  struct rlimit old {};
  struct sigaction previous {};
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    REQUIRE(sigaction(SIGXFSZ, &ignore, &previous) == 0);
    struct rlimit small = old;
    small.rlim_cur = bytes;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old);
    sigaction(SIGXFSZ, &previous, nullptr);
  }
};

}  // namespace

TEST_CASE("metrics.jsonl is written record by record and resumed without its cut line", "[io][metrics]") {
  tptrain::test::SharedTempDir dir("tptrain_metrics");
  const std::string d = rank_dir(dir), path = d + "/metrics.jsonl";
  {
    tptrain::io::MetricsWriter w(d, 0, remember);
    CHECK(w.path() == path);
    for (std::int64_t s : {1, 2, 3, 4, 5}) w.write(record_of(s));
    w.close();
  }
  CHECK(steps_of(tptrain::test::file_bytes(path)) == std::vector<std::int64_t>{1, 2, 3, 4, 5});

  // Killed in the middle of the record of step 6, resumed from the checkpoint of step 3.
  std::ofstream(path, std::ios::app) << "{\"step\": 6, \"loss\": 2.";
  g_warnings.clear();
  {
    tptrain::io::MetricsWriter w(d, 3, remember);
    w.write(record_of(4));
    w.close();
  }
  CHECK(steps_of(tptrain::test::file_bytes(path)) == std::vector<std::int64_t>{1, 2, 3, 4});
  REQUIRE(g_warnings.size() == 1);
  CHECK_THAT(g_warnings[0], tptrain::test::contains(path + ":6: the last line was cut off"));
  CHECK_THAT(g_warnings[0], tptrain::test::contains("dropped '{\"step\": 6, \"loss\": 2.'"));

  // A bad line: refused, and the file is left as it was.
  std::ofstream(path, std::ios::app) << "{\"step\": 99999999999999999999}\n";
  const std::string before = tptrain::test::file_bytes(path);
  CHECK_THROWS_WITH(tptrain::io::MetricsWriter(d, 4, remember),
                    tptrain::test::contains(path + ":5: the step '99999999999999999999'"));
  CHECK(tptrain::test::file_bytes(path) == before);

  // A new run (not resumed) starts the file again.
  {
    tptrain::io::MetricsWriter w(d, 0, remember);
    w.write(record_of(1));
    w.close();
  }
  CHECK(steps_of(tptrain::test::file_bytes(path)) == std::vector<std::int64_t>{1});

  // Ranks other than 0 write nothing.
  tptrain::io::MetricsWriter none("", 0, remember);
  none.write(record_of(1));
  none.close();
  CHECK(none.path().empty());
}

TEST_CASE("metrics.jsonl that is not a regular file is refused, not waited on", "[io][metrics]") {
  tptrain::test::SharedTempDir dir("tptrain_metrics");
  const std::string d = rank_dir(dir), path = d + "/metrics.jsonl";
  REQUIRE(mkfifo(path.c_str(), 0644) == 0);  // opening it for writing would wait for a reader
  for (std::int64_t resumed : {0, 3})
    CHECK_THROWS_WITH(tptrain::io::MetricsWriter(d, resumed, remember),
                      tptrain::test::contains(path + " is not a regular file"));
  fs::remove(path);
  fs::create_directory(path);
  CHECK_THROWS_WITH(tptrain::io::MetricsWriter(d, 0, remember),
                    tptrain::test::contains("cannot open " + path + " for writing: Is a directory"));
}

TEST_CASE("a metrics write on a full file system fails with the reason, and the file keeps whole records",
          "[io][metrics][diskfull]") {
  tptrain::test::SharedTempDir dir("tptrain_metrics");
  const std::string d = rank_dir(dir), path = d + "/metrics.jsonl";
  const std::size_t line = tptrain::io::to_json(record_of(10)).size() + 1;
  std::string message;
  std::int64_t failed_at = 0;
  {
    tptrain::io::MetricsWriter w(d, 0, remember);
    const FileSizeLimit limit(static_cast<rlim_t>(line * 5 + line / 2));  // room for 5.5 records
    try {
      for (std::int64_t s = 10; s < 100; ++s) {
        failed_at = s;
        w.write(record_of(s));
      }
    } catch (const tptrain::io::MetricsWriteError& e) {
      message = e.what();
    }
  }
  INFO(message);
  CHECK(failed_at == 15);  // the 6th record: half of it fitted
  CHECK_THAT(message, tptrain::test::contains("cannot write the record of step 15 to " + path + ": File too large"));
  CHECK_THAT(message, tptrain::test::contains("the file ends with the record of step 14"));
  // The half-written record was cut off again: whole records only, none lost before it.
  CHECK(steps_of(tptrain::test::file_bytes(path)) == std::vector<std::int64_t>{10, 11, 12, 13, 14});

  // The first record already fails: nothing of it stays.
  {
    tptrain::io::MetricsWriter w(d, 0, remember);
    const FileSizeLimit limit(static_cast<rlim_t>(line / 2));
    CHECK_THROWS_WITH(w.write(record_of(1)), tptrain::test::contains("File too large; the file holds no record"));
  }
  CHECK(tptrain::test::file_bytes(path).empty());
}
