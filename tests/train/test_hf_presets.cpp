// The Hugging Face presets (src/checkpoint/hf_presets.cpp): each is the form of its block preset, and a
// block specification no Hugging Face architecture computes is refused by name, not exported
// under names that would compute another model.
#include "catch.hpp"
#include "src/model/spec/model_parameters.hpp"
#include "src/checkpoint/hf_format.hpp"
#include "src/checkpoint/hf_presets.hpp"

using namespace tptrain;
using Catch::Matchers::Contains;

namespace {

model::GptShape shape_of_preset(const char* name) {
  model::GptShape s;
  static_cast<model::BlockSpec&>(s) = model::block_preset(name)->spec;
  s.layers = 2, s.hidden = 16, s.heads = 4, s.ffn_hidden = 24, s.seq_length = 8, s.vocab_size = 11;
  if (s.latent_attention()) {  // DeepseekV3ForCausalLM's router and latent norms (src/checkpoint/hf_deepseek.hpp)
    s.moe_score_function = "sigmoid";
    s.norm_eps = 1e-6;
  }
  return s;
}

}  // namespace

TEST_CASE("hf presets: each block preset's form, every tensor named, biases included", "[train][hf]") {
  for (const checkpoint::HfPreset& p : checkpoint::hf_presets()) {
    INFO(p.architecture);
    REQUIRE(model::block_preset(p.block_preset) != nullptr);
    const model::GptShape s = shape_of_preset(p.block_preset);
    CHECK(&checkpoint::hf_preset_of(s) == &p);
    const checkpoint::HfFormat f = checkpoint::hf_format(s);
    CHECK(f.architecture == p.architecture);
    CHECK_THAT(f.config_json, Contains(std::string("\"") + p.architecture + "\"") &&
                                  Contains(std::string("\"model_type\": \"") + p.model_type + "\""));
    // Every checkpoint tensor is named, each of its rows once.
    std::size_t rows = 0, expected = 0;
    for (const model::LogicalTensor& t : model::logical_tensors(s)) expected += static_cast<std::size_t>(t.shape[0]);
    for (const checkpoint::HfTensor& t : f.tensors) {
      CHECK(t.hf_name.find("{i}") == std::string::npos);
      rows += t.rows;
    }
    CHECK(rows == expected);
    // Tied, the head is the word embedding's tensor.
    model::GptShape tied = s;
    tied.tie_embeddings = true;
    CHECK(checkpoint::hf_format(tied).tied_to == model::hf_name(model::kEmbeddingParameters[0], p.naming).pattern);
  }
}

TEST_CASE("hf presets: a specification no Hugging Face architecture computes is refused by its choices",
          "[train][hf]") {
  model::GptShape s = shape_of_preset("gpt2");
  s.position = "rope";  // a valid tptrain model; GPT2LMHeadModel has learned positions
  CHECK_THROWS_WITH(checkpoint::hf_format(s), Contains("model.position = \"rope\"") &&
                                             Contains("GPT2LMHeadModel (model.architecture = \"gpt2\")") &&
                                             Contains("LlamaForCausalLM (model.architecture = \"llama\")") &&
                                             Contains("DeepseekV3ForCausalLM (model.architecture = \"deepseek_v3\")"));
  model::GptShape biased = shape_of_preset("llama");
  biased.linear_bias = true;
  CHECK_THROWS_WITH(checkpoint::hf_format(biased), Contains("model.linear_bias = true"));
}
