// The block specification's own rules (src/model/spec/block_spec.hpp), stated once and read by the deck
// and GptShape::validate: every preset meets them, each broken rule names its keys, and the
// keys it mentions are written by the reader (base/rules.hpp).
#include "src/model/spec/block_spec.hpp"

#include <stdexcept>

#include "catch.hpp"
#include "src/model/spec/gpt_shape.hpp"
#include "tests/model/model_test_util.hpp"

using namespace tptrain;
using Catch::Matchers::Contains;

TEST_CASE("block spec rules: every preset meets them", "[base][rules]") {
  std::size_t count = 0;
  const model::BlockPreset* presets = model::block_presets(count);
  REQUIRE(count >= 3);
  for (std::size_t i = 0; i < count; ++i) {
    INFO(presets[i].name);
    CHECK(model::block_spec_problems(presets[i].spec, 768, 12).empty());
  }
}

TEST_CASE("block spec rules: rotary embeddings need an even head dimension", "[base][rules]") {
  CHECK(model::rotary_problems("rope", 64, 4).empty());
  CHECK(model::rotary_problems("learned", 36, 4).empty());  // learned positions: any head dimension
  const auto odd = model::rotary_problems("rope", 36, 4);
  REQUIRE(odd.size() == 1);
  CHECK(odd[0].subject.key == "model.heads");
  CHECK(odd[0].subject.value == 4);
  REQUIRE(odd[0].mentions.size() == 1);
  CHECK(odd[0].mentions[0].key == "model.position");
  CHECK_THAT(odd[0].text(),
             Contains("model.heads = 4: expected an even head dimension with model.position = \"rope\"") &&
                 Contains("36 / 4 = 9 is odd"));
  // The deck writes the mentioned key its own way (with where it was set).
  const auto located = [](const rules::KeyValue& kv) { return kv.key + " = " + kv.value_text() + " (line 3)"; };
  CHECK_THAT(odd[0].expected_text(located),
             Contains("with model.position = \"rope\" (line 3): rotary"));
}

TEST_CASE("block spec rules: LayerNorm carries a bias", "[base][rules]") {
  CHECK(model::norm_bias_problems("layernorm", true).empty());
  CHECK(model::norm_bias_problems("rmsnorm", false).empty());
  const auto p = model::norm_bias_problems("layernorm", false);
  REQUIRE(p.size() == 1);
  CHECK(p[0].subject.key == "model.linear_bias");
  CHECK_THAT(p[0].text(), Contains("model.linear_bias = false: expected true with model.norm = \"layernorm\""));
}

TEST_CASE("block spec rules: a choice's keys stay at their defaults without it", "[base][rules]") {
  CHECK(model::unused_choice_problems("rmsnorm", 1e-6, "rope", 5e5).empty());
  CHECK(model::unused_choice_problems("layernorm", 1e-5, "learned", 10000.0).empty());
  const auto both = model::unused_choice_problems("layernorm", 1e-6, "learned", 5e5);
  REQUIRE(both.size() == 2);
  CHECK_THAT(both[0].text(),
             Contains("model.norm_eps = 1e-06: expected to be left out with model.norm = \"layernorm\""));
  CHECK_THAT(both[1].text(),
             Contains("model.rope_theta = 500000: expected to be left out with model.position = \"learned\""));
}

TEST_CASE("block spec rules: a shape built in code is refused with the same words", "[base][rules][model]") {
  model::GptShape s = tptrain::test::tiny_shape(1);
  s.hidden = 36;  // 4 heads of 9 features
  CHECK_NOTHROW(s.validate());
  s.position = "rope";
  CHECK_THROWS_WITH(s.validate(), Contains("an even head dimension") && Contains("36 / 4 = 9 is odd"));
  s.position = "learned";
  s.linear_bias = false;
  CHECK_THROWS_WITH(s.validate(), Contains("model.linear_bias = false: expected true with model.norm = \"layernorm\""));
  s.linear_bias = true;
  s.norm_eps = 1e-6;
  CHECK_THROWS_WITH(s.validate(), Contains("model.norm_eps = 1e-06: expected to be left out"));
}
