// The checkpoint <-> GPT2LMHeadModel table (src/checkpoint/hf_gpt2.hpp): every model tensor has its
// HF name and Conv1D orientation, config.json says the model tptrain computes and reads back, and
// configs of models tptrain does not compute are refused by field. The numbers themselves are held
// to an independent PyTorch GPT-2 by tests/hf/ (cli_hf_reference_*).
#include <filesystem>

#include "catch.hpp"

#include <fstream>
#include <map>
#include <set>

#include "data/scratch_dir.hpp"
#include "src/model/spec/model_parameters.hpp"
#include "src/checkpoint/hf_gpt2.hpp"
#include "src/checkpoint/hf_tensors.hpp"

using namespace tptrain;
using Catch::Matchers::Contains;

namespace {

model::GptShape small_shape() {
  model::GptShape s;
  s.layers = 3;
  s.hidden = 8;
  s.heads = 2;
  s.ffn_hidden = 40;
  s.seq_length = 5;
  s.vocab_size = 11;
  return s;
}

std::string write(const test::ScratchDir& dir, const std::string& text) {
  const std::string path = dir.file("config.json");
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("hf_gpt2: every model tensor has GPT2LMHeadModel's name and shape", "[train][hf]") {
  const model::GptShape s = small_shape();
  const auto tensors = checkpoint::hf_tensors(s, model::HfNaming::gpt2);
  REQUIRE(tensors.size() == model::logical_tensors(s).size());
  std::map<std::string, std::vector<std::uint64_t>> hf;
  for (const auto& t : tensors) hf[t.hf_name] = t.hf_shape();
  REQUIRE(hf.size() == tensors.size());  // no name twice
  using V = std::vector<std::uint64_t>;
  CHECK(hf.at("transformer.wte.weight") == V{11, 8});
  CHECK(hf.at("transformer.wpe.weight") == V{5, 8});
  CHECK(hf.at("transformer.h.2.ln_1.weight") == V{8});
  CHECK(hf.at("transformer.h.2.attn.c_attn.weight") == V{8, 24});  // [in, out] = [H, 3H]
  CHECK(hf.at("transformer.h.2.attn.c_attn.bias") == V{24});
  CHECK(hf.at("transformer.h.0.attn.c_proj.weight") == V{8, 8});
  CHECK(hf.at("transformer.h.1.mlp.c_fc.weight") == V{8, 40});     // [H, F]
  CHECK(hf.at("transformer.h.1.mlp.c_proj.weight") == V{40, 8});   // [F, H]
  CHECK(hf.at("transformer.h.1.mlp.c_proj.bias") == V{8});
  CHECK(hf.at("transformer.ln_f.bias") == V{8});
  CHECK(hf.count("lm_head.weight") == 0);  // tied to wte, as save_pretrained leaves it out
  for (const auto& t : tensors)
    CHECK(t.transposed == (t.hf_name.find(".weight") != std::string::npos && t.checkpoint_shape.size() == 2 &&
                           t.hf_name.find("wte") == std::string::npos && t.hf_name.find("wpe") == std::string::npos));
}

TEST_CASE("hf_gpt2: Conv1D weights are the transpose of the checkpoint's [out, in]; both ways", "[train][hf]") {
  const auto tensors = checkpoint::hf_tensors(small_shape(), model::HfNaming::gpt2);
  for (const auto& t : tensors) {
    std::uint64_t n = 1;
    for (auto d : t.checkpoint_shape) n *= d;
    std::vector<float> x(n);
    for (std::uint64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i);
    const std::vector<float> h = checkpoint::to_hf(t, x);
    std::vector<float> back(n, -1.0f);
    checkpoint::from_hf(t, h, back);
    CHECK(back == x);
    if (!t.transposed) {
      CHECK(h == x);
      continue;
    }
    // checkpoint [out, in]: element (o, i) is HF's (i, o). For c_attn, out o < H is q's column o,
    // H <= o < 2H k's, 2H <= o v's, as in HF's qkv.split(n_embd, dim=2).
    const std::uint64_t out = t.checkpoint_shape[0], in = t.checkpoint_shape[1];
    for (std::uint64_t o = 0; o < out; ++o)
      for (std::uint64_t i = 0; i < in; ++i) REQUIRE(h[i * out + o] == x[o * in + i]);
  }
}

TEST_CASE("hf_gpt2: config.json describes the model and reads back; other models are refused", "[train][hf]") {
  test::ScratchDir dir("hf_config");
  model::GptShape s = small_shape();
  const std::string text = checkpoint::hf_gpt2_config(s, false);
  CHECK_THAT(text, Contains("\"activation_function\": \"gelu_new\"") && Contains("\"layer_norm_epsilon\": 1e-05") &&
                       Contains("\"tie_word_embeddings\": true") && Contains("\"GPT2LMHeadModel\""));
  CHECK_THAT(text, !Contains("eos_token_id"));
  CHECK_THAT(checkpoint::hf_gpt2_config(s, true), Contains("\"eos_token_id\": 50256"));
  const checkpoint::HfGpt2Config c = checkpoint::read_hf_gpt2_config(write(dir, text));
  CHECK(c.n_layer == 3);
  CHECK(c.n_inner == 40);
  CHECK(checkpoint::hf_config_mismatch(c, s).empty());
  // More positions than the deck's context are fine; fewer, or another width, are not.
  model::GptShape other = s;
  other.seq_length = 4;
  CHECK(checkpoint::hf_config_mismatch(c, other).empty());
  other.seq_length = 6;
  other.hidden = 16;
  const std::string diff = checkpoint::hf_config_mismatch(c, other);
  CHECK_THAT(diff, Contains("config.json n_embd = 8, the deck's model.hidden = 16"));
  CHECK_THAT(diff, Contains("n_positions = 5 is less than the deck's model.seq_length = 6"));
  // n_inner null is GPT2Config's 4 * n_embd.
  CHECK(checkpoint::read_hf_gpt2_config(write(dir, R"({"model_type":"gpt2","n_layer":1,"n_embd":8,"n_head":2,)"
                                                R"("vocab_size":5,"n_positions":4,"n_inner":null})"))
            .n_inner == 32);
  const std::string base = R"({"model_type":"gpt2","n_layer":1,"n_embd":8,"n_head":2,"vocab_size":5,"n_positions":4)";
  const std::vector<std::pair<std::string, std::string>> refused{
      {R"(,"activation_function":"gelu"})", "activation_function = \"gelu\""},
      {R"(,"layer_norm_epsilon":1e-6})", "layer_norm_epsilon = 1e-06"},
      {R"(,"scale_attn_by_inverse_layer_idx":true})", "scale_attn_by_inverse_layer_idx = true"},
      {R"(,"n_head":0})", "n_head = 0: expected a positive integer"},
      {R"(,"activation_function":5})", "activation_function = 5: expected a string"},
      {R"(,"tie_word_embeddings":"yes"})", "tie_word_embeddings = \"yes\": expected true or false"},
  };
  for (const auto& [extra, message] : refused) {
    CAPTURE(extra);
    CHECK_THROWS_WITH(checkpoint::read_hf_gpt2_config(write(dir, base + extra)), Contains(message) && Contains("config.json"));
  }
  CHECK_THROWS_WITH(checkpoint::read_hf_gpt2_config(write(dir, R"({"model_type":"llama"})")), Contains("model_type is \"llama\""));
  // An untied GPT-2 (issue 30: export aborted on lm_head/weight): config.json says so, reads back,
  // and must agree with the deck's model.tie_embeddings; the head is HF's lm_head.weight.
  model::GptShape untied = s;
  untied.tie_embeddings = false;
  CHECK_THAT(checkpoint::hf_gpt2_config(untied, false), Contains("\"tie_word_embeddings\": false"));
  const checkpoint::HfGpt2Config u = checkpoint::read_hf_gpt2_config(write(dir, base + R"(,"tie_word_embeddings":false})"));
  CHECK_FALSE(u.tie_embeddings);
  model::GptShape tiny = s;
  tiny.layers = 1, tiny.hidden = 8, tiny.heads = 2, tiny.ffn_hidden = 32, tiny.vocab_size = 5, tiny.seq_length = 4;
  CHECK_THAT(checkpoint::hf_config_mismatch(u, tiny),
             Contains("config.json tie_word_embeddings = false, the deck's model.tie_embeddings = true"));
  tiny.tie_embeddings = false;
  CHECK(checkpoint::hf_config_mismatch(u, tiny).empty());
  bool head = false;
  for (const auto& t : checkpoint::hf_tensors(untied, model::HfNaming::gpt2))
    if (t.checkpoint_name == "lm_head/weight") head = t.hf_name == "lm_head.weight" && !t.transposed;
  CHECK(head);
  // A config.json that is not a file is refused by name (it gave "basic_filebuf::underflow").
  std::filesystem::create_directories(dir.file("folder.json"));
  CHECK_THROWS_WITH(checkpoint::read_hf_gpt2_config(dir.file("folder.json")),
                    Contains("Hugging Face config ") && Contains("folder.json") && Contains("is a directory"));
  CHECK_THROWS_WITH(checkpoint::read_hf_gpt2_config(write(dir, R"({"model_type":"gpt2"})")), Contains("no n_layer"));
  CHECK_THROWS_WITH(checkpoint::read_hf_gpt2_config(write(dir, "{")), Contains("not valid JSON"));
  CHECK_THROWS_WITH(checkpoint::read_hf_gpt2_config(dir.file("absent.json")), Contains("absent.json"));
}
