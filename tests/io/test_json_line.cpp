// The one JSON writer (io/json_line.hpp): strict JSON whatever the values, in the layout tptrain
// has always printed. Parsing every JSON line of the executable strictly: tests/strict_json.py.
#include "catch.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "io/chrome_trace.hpp"
#include "io/json_line.hpp"
#include "io/metrics.hpp"

using namespace tptrain::io;

namespace {
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

TEST_CASE("json_number: a number that is not finite is null; finite ones in the format asked", "[io][json]") {
  CHECK(json_number(kInf) == "null");
  CHECK(json_number(-kInf, digits(17)) == "null");
  CHECK(json_number(kNaN, fixed(1)) == "null");
  CHECK(json_number(-kNaN, exponent(6)) == "null");  // printf's "-nan"
  CHECK(json_number(0.1, digits(17)) == "0.10000000000000001");
  CHECK(json_number(1000, fixed(1)) == "1000.0");
  CHECK(json_number(85899345920.0, fixed(0)) == "85899345920");
  CHECK(json_number(4.5e18, exponent(6)) == "4.500000e+18");
  CHECK(json_number(0.45, digits(6)) == "0.45");
  // shortest: reads back as the same double, and as a float
  CHECK(json_number(1.0) == "1.0");
  CHECK(json_number(3e-5) == "3e-05");
  CHECK(json_number(0.1) == "0.1");
  CHECK(std::stod(json_number(1.0 / 3.0)) == 1.0 / 3.0);
}

TEST_CASE("json_string: escapes, and bytes that are not UTF-8 as U+FFFD", "[io][json]") {
  CHECK(json_string("a\"b\\c") == R"("a\"b\\c")");
  CHECK(json_string("line\nnext\ttab\r") == R"("line\nnext\ttab\r")");
  const char controls[] = "nul\0bell\x07" "del\x7f";
  CHECK(json_string(std::string(controls, sizeof controls - 1)) == R"("nul\u0000bell\u0007del\u007F")");
  CHECK(json_string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  CHECK(json_string("\xff\xfe") == R"("\uFFFD\uFFFD")");
  CHECK(json_string("cut \xe2\x82") == R"("cut \uFFFD\uFFFD")");            // a sequence cut short
  CHECK(json_string("overlong \xc0\xaf") == R"("overlong \uFFFD\uFFFD")");  // '/' in two bytes
  CHECK(json_string("surrogate \xed\xa0\x80") == R"("surrogate \uFFFD\uFFFD\uFFFD")");
}

TEST_CASE("JsonObject: the layout of tptrain's lines, nulls remembered with their place", "[io][json]") {
  JsonObject inner;
  inner.integer("bytes", std::int64_t(1) << 40).number("rate", kInf, digits(6));
  JsonObject item;
  item.strings("set", {"a=1", "b=\"2\""}).number("days", kNaN, digits(6));
  JsonObject o;
  o.string("deck", "x.toml").integer("gpus", 8).number("loss", 2.5, digits(17)).boolean("fits", false);
  o.object("memory", inner).strings("problems", {}).objects("suggestions", {item, JsonObject()});
  CHECK(o.text() == R"({"deck": "x.toml", "gpus": 8, "loss": 2.5, "fits": false, "memory": {"bytes": 1099511627776, )"
                    R"("rate": null}, "problems": [], "suggestions": [{"set": ["a=1", "b=\"2\""], "days": null}, {}]})");
  REQUIRE(o.non_finite().size() == 2);
  CHECK(o.non_finite()[0].first == "memory.rate");
  CHECK(o.non_finite()[1].first == "suggestions[0].days");
  CHECK(describe_non_finite(o) == "memory.rate = inf, suggestions[0].days = nan");
  CHECK(JsonObject().text() == "{}");
  CHECK(JsonObject().integers("tokens", {50256, 0, -1}).integers("none", {}).text() ==
        R"({"tokens": [50256, 0, -1], "none": []})");
}

TEST_CASE("metrics.jsonl: a loss, eval loss or loss scale that is not finite is null", "[io][json][metrics]") {
  MetricsRecord r;
  r.step = 7;
  r.loss = -kNaN;
  r.lr = 1e-3;
  r.grad_norm = kInf;
  r.tokens_per_s = 10;
  r.eval_loss = kNaN;
  r.loss_scale = kInf;
  r.skipped = 1;
  CHECK(to_json(r) == R"({"step": 7, "loss": null, "lr": 0.001, "grad_norm": null, "tokens_per_s": 10.0, )"
                      R"("eval_loss": null, "loss_scale": null, "skipped": 1})");
}

TEST_CASE("ChromeTrace: metadata names ranks and streams, spans are complete events", "[io][json][trace]") {
  tptrain::io::ChromeTrace trace;
  trace.track({1, 2, "tensor-parallel"});
  trace.span({"all-reduce \"tp\"", "tensor", 1, 2, 10.5, 2.25});
  const std::string j = trace.json();
  CHECK(j.rfind("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", 0) == 0);
  CHECK(j.find(R"({"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "rank 1"}})") !=
        std::string::npos);
  CHECK(j.find(R"({"name": "thread_name", "ph": "M", "pid": 1, "tid": 2, "args": {"name": "tensor-parallel"}})") !=
        std::string::npos);
  CHECK(j.find(R"({"name": "all-reduce \"tp\"", "cat": "tensor", "ph": "X", "pid": 1, "tid": 2, "ts": 10.500, )"
               R"("dur": 2.250})") != std::string::npos);
  CHECK_THROWS_WITH(trace.write("/nonexistent-dir/t.json"), Catch::Contains("/nonexistent-dir/t.json"));
}
