// The layout's rules (base/layout_rules.hpp), stated once and read by the deck, the model, the
// planner and the schedule: each problem names its keys, and a valid layout has none.
#include "base/layout_rules.hpp"

#include "catch.hpp"

using namespace tptrain;
using Catch::Matchers::Contains;

TEST_CASE("layout rules: grouped-query attention's key/value heads", "[base][rules]") {
  CHECK(rules::kv_head_problems(8, 8, 4).empty());  // multi-head: the heads' own rule
  CHECK(rules::kv_head_problems(8, 4, 4).empty());
  CHECK(rules::kv_head_problems(8, 2, 1).empty());
  const auto divides = rules::kv_head_problems(8, 3, 1);
  REQUIRE(divides.size() == 1);
  CHECK(divides[0].divisibility());
  CHECK(divides[0].subject.key == "model.heads");
  CHECK(divides[0].divisor.key == "model.kv_heads");
  const auto tensor = rules::kv_head_problems(32, 8, 16);
  REQUIRE(tensor.size() == 1);
  CHECK(tensor[0].subject.key == "model.kv_heads");
  CHECK(tensor[0].divisor.key == "parallel.tensor");
  CHECK_THAT(tensor[0].text(), Contains("model.kv_heads = 8 is not a multiple of parallel.tensor = 16") &&
                                   Contains("the nearest valid layouts are parallel.tensor = 8"));
  CHECK_THAT(rules::kv_head_problems(12, 6, 4)[0].why, Contains("parallel.tensor = 3 or 6"));
}

TEST_CASE("layout rules: the interleaved schedule's chunks and micro-batch groups", "[base][rules]") {
  CHECK(rules::interleave_problems(8, 2, 1, 3).empty());  // not interleaved
  CHECK(rules::interleave_problems(8, 2, 2, 4).empty());
  const auto alone = rules::interleave_problems(8, 1, 2, 4);
  REQUIRE(alone.size() == 1);
  CHECK_THAT(alone[0].text(), Contains("parallel.virtual_stages = 2: expected 1 with parallel.pipeline = 1"));
  const auto both = rules::interleave_problems(6, 2, 2, 3);  // 6 layers over 4 chunks; 3 micro-batches
  REQUIRE(both.size() == 2);
  CHECK_THAT(both[0].expected, Contains("model.layers = 6 must be a multiple of parallel.pipeline * "
                                        "parallel.virtual_stages = 2 * 2 = 4"));
  CHECK_THAT(both[1].expected, Contains("1 with 3 micro-batches per step"));
  CHECK(rules::interleave_problems(6, 2, 2, 0).size() == 1);  // micro-batches not known yet
}
