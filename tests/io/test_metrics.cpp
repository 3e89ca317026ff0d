// metrics.jsonl records: the fixed fields, then the caller's integer fields in order.
#include "catch.hpp"
#include "io/metrics.hpp"

TEST_CASE("a metrics record ends with the caller's integer fields, in order", "[io][metrics]") {
  tptrain::io::MetricsRecord r;
  r.step = 3;
  r.loss = 2.5;
  r.lr = 1e-3;
  r.grad_norm = 0.5;
  r.tokens_per_s = 1000;
  CHECK(tptrain::io::to_json(r) == R"({"step": 3, "loss": 2.5, "lr": 0.001, "grad_norm": 0.5, "tokens_per_s": 1000.0})");
  r.fields = {{"mem_weights_bytes", 123456789012}, {"mem_peak_bytes", 0}, {"odd \"name\"", -1}};
  CHECK(tptrain::io::to_json(r) == R"({"step": 3, "loss": 2.5, "lr": 0.001, "grad_norm": 0.5, "tokens_per_s": 1000.0, )"
                                   R"("mem_weights_bytes": 123456789012, "mem_peak_bytes": 0, "odd \"name\"": -1})");
}
