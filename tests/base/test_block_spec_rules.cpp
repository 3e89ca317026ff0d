// The rules of the block specification's kinds (src/model/spec/sublayer_kinds.hpp), each stated
// once by its kind and read by the deck, the model, the planner and a checkpoint's deck: every
// preset meets them, each broken rule names its keys, and the keys it mentions are written by the
// reader (base/rules.hpp).
#include "src/model/spec/sublayer_kinds.hpp"

#include <stdexcept>

#include "catch.hpp"
#include "src/model/spec/gpt_shape.hpp"
#include "tests/model/model_test_util.hpp"

using namespace tptrain;
using Catch::Matchers::Contains;

namespace {
// The preset's block with every kind's keys at the deck's defaults (as a deck that leaves them
// out reads; BlockSpec's own defaults are not all the deck's).
model::ModelShape shape_of(const char* preset, int hidden, int heads) {
  model::ModelShape s;
  static_cast<model::BlockSpec&>(s) = model::block_preset(preset)->spec;
  for (const model::OwnedKindKey& owned : model::kind_keys()) model::set_kind_key(*owned.key, s);
  s.hidden = hidden;
  s.heads = heads;
  return s;
}
}  // namespace

TEST_CASE("block spec rules: every preset meets them", "[base][rules]") {
  std::size_t count = 0;
  const model::BlockPreset* presets = model::block_presets(count);
  REQUIRE(count >= 3);
  for (std::size_t i = 0; i < count; ++i) {
    INFO(presets[i].name);
    CHECK(model::sublayer_problems(shape_of(presets[i].name, 768, 12)).empty());
    CHECK(model::unchosen_key_problems(shape_of(presets[i].name, 768, 12)).empty());
  }
}

TEST_CASE("block spec rules: rotary embeddings need an even head dimension", "[base][rules]") {
  CHECK(model::sublayer_problems(shape_of("llama", 64, 4)).empty());
  model::ModelShape learned = shape_of("llama", 36, 4);
  learned.position = "learned";
  CHECK(model::sublayer_problems(learned).empty());  // learned positions: any head dimension
  const auto odd = model::sublayer_problems(shape_of("llama", 36, 4));
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
  model::ModelShape s = shape_of("gpt2", 64, 4);
  CHECK(model::sublayer_problems(s).empty());
  s.linear_bias = false;
  const auto p = model::sublayer_problems(s);
  REQUIRE(p.size() == 1);
  CHECK(p[0].subject.key == "model.linear_bias");
  CHECK_THAT(p[0].text(), Contains("model.linear_bias = false: expected true with model.norm = \"layernorm\""));
  s.norm = "rmsnorm";
  CHECK(model::sublayer_problems(s).empty());
}

TEST_CASE("block spec rules: a kind's keys stay at their defaults without it", "[base][rules]") {
  model::ModelShape llama = shape_of("llama", 64, 4);
  llama.norm_eps = 1e-6;
  llama.rope_theta = 5e5;
  CHECK(model::unchosen_key_problems(llama).empty());
  model::ModelShape gpt2 = shape_of("gpt2", 64, 4);
  CHECK(model::unchosen_key_problems(gpt2).empty());
  gpt2.norm_eps = 1e-6;
  gpt2.rope_theta = 5e5;
  const auto both = model::unchosen_key_problems(gpt2);
  REQUIRE(both.size() == 2);
  CHECK_THAT(both[0].text(),
             Contains("model.norm_eps = 1e-06: expected to be left out with model.norm = \"layernorm\": LayerNorm "
                      "uses 1e-5"));
  CHECK_THAT(both[1].text(),
             Contains("model.rope_theta = 500000: expected to be left out with model.position = \"learned\""));
}

TEST_CASE("block spec rules: a kind's keys keep their ranges in a shape built in code", "[base][rules][model]") {
  model::ModelShape s = shape_of("llama", 64, 4);
  s.norm_eps = 0;  // at least one kind key's range
  const auto eps = model::sublayer_problems(s);
  REQUIRE(eps.size() == 1);
  CHECK_THAT(eps[0].text(), Contains("model.norm_eps = 0: expected above 0 and below 1"));
  s = shape_of("mixtral", 64, 4);
  s.experts_per_token = 0;
  CHECK_THAT(model::sublayer_problems(s).at(0).text(), Contains("model.experts_per_token = 0: expected at least 1"));
}

TEST_CASE("block spec rules: a model built in code is refused with the same words", "[base][rules][model]") {
  model::GptShape s = tptrain::test::tiny_shape(1);
  s.hidden = 36;  // 4 heads of 9 features
  CHECK_NOTHROW(model::GptModel<float>::validated(s, 1));
  s.position = "rope";
  CHECK_THROWS_WITH(model::GptModel<float>::validated(s, 1),
                    Contains("an even head dimension") && Contains("36 / 4 = 9 is odd"));
  s.position = "learned";
  s.linear_bias = false;
  CHECK_THROWS_WITH(model::GptModel<float>::validated(s, 1),
                    Contains("model.linear_bias = false: expected true with model.norm = \"layernorm\""));
}
