// The checkpoint <-> MixtralForCausalLM table (src/checkpoint/hf_llama.hpp, hf_presets.cpp): a
// mixtral block's router is block_sparse_moe.gate, each expert's fused mlp/experts/e/fc rows are
// its w1|w3 (gate|up) and its proj is w2, expert by expert, beside Llama's attention; config.json
// says the mixture (num_local_experts, num_experts_per_tok) and reads back under MixtralConfig's
// defaults; configs of mixtures tptrain does not compute, or without their size, are refused by
// field. The numbers themselves are held to an independent PyTorch Mixtral by tests/hf/
// (cli_hf_reference_mixtral_*).
#include "catch.hpp"

#include <fstream>
#include <map>

#include "data/scratch_dir.hpp"
#include "src/model/spec/model_parameters.hpp"
#include "src/checkpoint/hf_format.hpp"
#include "src/checkpoint/hf_llama.hpp"
#include "tests/train/hf_test_util.hpp"

using namespace tptrain;
using Catch::Matchers::Contains;

namespace {

model::GptShape mixtral_shape() {
  model::GptShape s;
  static_cast<model::BlockSpec&>(s) = model::block_preset("mixtral")->spec;
  s.tie_embeddings = false;
  s.layers = 2;
  s.hidden = 16;
  s.heads = 4;  // d = 4
  s.kv_heads = 2;
  s.ffn_hidden = 12;
  s.seq_length = 8;
  s.vocab_size = 11;
  s.norm_eps = 1e-5;
  s.rope_theta = 1e6;
  s.experts = 3;
  s.experts_per_token = 2;
  return s;
}

const checkpoint::HfPreset& mixtral_preset() { return checkpoint::hf_preset_of(mixtral_shape()); }

std::string write(const test::ScratchDir& dir, const std::string& text) {
  const std::string path = dir.file("config.json");
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("hf_mixtral: the mixtral block is MixtralForCausalLM, router and experts by name", "[train][hf]") {
  const model::GptShape s = mixtral_shape();
  const checkpoint::HfPreset& p = mixtral_preset();
  CHECK(std::string(p.architecture) == "MixtralForCausalLM");
  CHECK(std::string(p.model_type) == "mixtral");
  CHECK(p.config == checkpoint::HfConfigFamily::mixtral);
  const checkpoint::HfFormat f = checkpoint::hf_format(s);
  CHECK(f.prefix == "model.");
  CHECK(f.tied_to.empty());
  std::map<std::string, checkpoint::HfTensor> hf;
  for (const auto& t : f.tensors) hf[t.hf_name] = t;
  REQUIRE(hf.size() == f.tensors.size());  // no name twice
  // 3 model-level tensors and, per block, 2 norms + q, k, v, o + the router + E experts' w1, w3, w2.
  CHECK(f.tensors.size() == 3 + 2 * (7 + 3 * 3));
  using V = std::vector<std::uint64_t>;
  const checkpoint::HfTensor& gate = hf.at("model.layers.1.block_sparse_moe.gate.weight");
  CHECK(gate.checkpoint_name == "layers/1/mlp/router/weight");
  CHECK(gate.hf_shape() == V{3, 16});  // [E, H]
  for (int e = 0; e < 3; ++e) {
    INFO("expert " << e);
    const std::string name = "model.layers.0.block_sparse_moe.experts." + std::to_string(e) + ".";
    const checkpoint::HfTensor& w1 = hf.at(name + "w1.weight");
    const checkpoint::HfTensor& w3 = hf.at(name + "w3.weight");
    const checkpoint::HfTensor& w2 = hf.at(name + "w2.weight");
    const std::string fc = "layers/0/mlp/experts/" + std::to_string(e) + "/fc/weight";
    // [gate: F | up: F] rows of the checkpoint's [2F, H]: w1 then w3.
    CHECK(w1.checkpoint_name == fc);
    CHECK(w3.checkpoint_name == fc);
    CHECK(w1.checkpoint_shape == V{24, 16});
    CHECK((w1.row_begin == 0 && w1.hf_shape() == V{12, 16}));
    CHECK((w3.row_begin == 12 && w3.hf_shape() == V{12, 16}));
    CHECK(w2.checkpoint_name == "layers/0/mlp/experts/" + std::to_string(e) + "/proj/weight");
    CHECK(w2.hf_shape() == V{16, 12});
  }
  // Llama's attention and norms; no dense MLP.
  CHECK(hf.at("model.layers.1.self_attn.k_proj.weight").hf_shape() == V{8, 16});
  CHECK(hf.count("model.layers.0.mlp.gate_proj.weight") == 0);
  CHECK(hf.count("model.layers.0.mlp.down_proj.weight") == 0);
  CHECK(hf.at("lm_head.weight").hf_shape() == V{11, 16});
  for (const auto& t : f.tensors) CHECK_FALSE(t.transposed);  // nn.Linear's [out, in] in both
  // The keys a mismatch names: the router's rows are the experts, an expert's are ffn wide.
  CHECK(f.shape_keys("layers/0/mlp/router/weight") == "model.experts / num_local_experts, model.hidden / hidden_size");
  CHECK_THAT(f.shape_keys("layers/0/mlp/experts/2/fc/weight"), Contains("model.ffn_hidden / intermediate_size"));
  CHECK_THAT(f.shape_keys("layers/0/attn/qkv/weight"), Contains("model.kv_heads / num_key_value_heads"));

  // Each expert's pieces go back in place: every checkpoint row written by exactly its piece.
  CHECK(test::hf_pieces_go_back(f.tensors));

  // Another mixture is other tensors: E experts' worth of names.
  model::GptShape eight = s;
  eight.experts = 8;
  CHECK(checkpoint::hf_format(eight).tensors.size() == 3 + 2 * (7 + 8 * 3));
}

TEST_CASE("hf_mixtral: config.json describes the mixture and reads back; others are refused", "[train][hf]") {
  test::ScratchDir dir("hf_mixtral_config");
  const model::GptShape s = mixtral_shape();
  const std::string text = checkpoint::hf_format(s, {0.02}).config_json;
  CHECK_THAT(text, Contains("\"MixtralForCausalLM\"") && Contains("\"model_type\": \"mixtral\"") &&
                       Contains("\"num_local_experts\": 3") && Contains("\"num_experts_per_tok\": 2") &&
                       Contains("\"router_aux_loss_coef\": 0.02") && Contains("\"sliding_window\": null") &&
                       Contains("\"num_key_value_heads\": 2") && Contains("\"intermediate_size\": 12") &&
                       Contains("\"rope_theta\": 1000000.0") && Contains("\"rms_norm_eps\": 1e-05") &&
                       Contains("\"tie_word_embeddings\": false") && Contains("\"hidden_act\": \"silu\"") &&
                       Contains("\"max_position_embeddings\": 8") && Contains("\"head_dim\": 4"));
  // MixtralConfig has no bias switches, rope_scaling or use_sliding_window.
  CHECK_THAT(text, !Contains("attention_bias") && !Contains("mlp_bias") && !Contains("rope_scaling") &&
                       !Contains("use_sliding_window"));
  // Without the deck's coefficient, MixtralConfig's default.
  CHECK_THAT(checkpoint::hf_format(s).config_json, Contains("\"router_aux_loss_coef\": 0.001"));

  const checkpoint::HfLlamaConfig c = checkpoint::read_hf_llama_config(write(dir, text), mixtral_preset());
  CHECK(c.experts == 3);
  CHECK(c.experts_per_token == 2);
  CHECK_FALSE(c.sliding_window);
  CHECK(checkpoint::hf_config_mismatch(c, s).empty());
  model::GptShape other = s;
  other.experts = 4;
  other.experts_per_token = 1;
  const std::string diff = checkpoint::hf_config_mismatch(c, other);
  CHECK_THAT(diff, Contains("config.json num_local_experts = 3, the deck's model.experts = 4"));
  CHECK_THAT(diff, Contains("config.json num_experts_per_tok = 2, the deck's model.experts_per_token = 1"));

  // MixtralConfig's defaults: num_key_value_heads absent is 8 (null: the heads), rms_norm_eps
  // 1e-5, rope_theta 1e6.
  const std::string base = R"({"model_type":"mixtral","num_hidden_layers":1,"hidden_size":32,"num_attention_heads":8,)"
                           R"("intermediate_size":24,"vocab_size":5,"max_position_embeddings":8,)"
                           R"("num_local_experts":4,"num_experts_per_tok":2)";
  const checkpoint::HfLlamaConfig d = checkpoint::read_hf_llama_config(write(dir, base + "}"), mixtral_preset());
  CHECK(d.kv_heads == 8);
  CHECK(d.norm_eps == 1e-5);
  CHECK(d.rope_theta == 1e6);
  CHECK(d.experts == 4);
  CHECK(checkpoint::read_hf_llama_config(write(dir, base + R"(,"num_key_value_heads":null})"), mixtral_preset())
            .kv_heads == 8);  // the heads, here also 8
  const std::string four_heads = R"({"model_type":"mixtral","num_hidden_layers":1,"hidden_size":32,)"
                                 R"("num_attention_heads":4,"num_key_value_heads":null,"intermediate_size":24,)"
                                 R"("vocab_size":5,"num_local_experts":4,"num_experts_per_tok":2})";
  CHECK(checkpoint::read_hf_llama_config(write(dir, four_heads), mixtral_preset()).kv_heads == 4);
  // A window: refused when shorter than the deck's sequence, taken when it never hides a key.
  const checkpoint::HfLlamaConfig w =
      checkpoint::read_hf_llama_config(write(dir, base + R"(,"sliding_window":4})"), mixtral_preset());
  CHECK(w.sliding_window == 4);
  model::GptShape small = s;
  small.layers = 1, small.hidden = 32, small.heads = 8, small.kv_heads = 8, small.ffn_hidden = 24,
  small.vocab_size = 5, small.experts = 4;
  CHECK_THAT(checkpoint::hf_config_mismatch(w, small),
             Contains("config.json sliding_window = 4 is shorter than the deck's model.seq_length = 8"));
  CHECK(checkpoint::hf_config_mismatch(checkpoint::read_hf_llama_config(write(dir, base + R"(,"sliding_window":8})"),
                                                                         mixtral_preset()),
                                       small)
            .empty());

  const std::vector<std::pair<std::string, std::string>> refused{
      {R"(,"num_local_experts":null})", "no num_local_experts"},
      {R"(,"num_experts_per_tok":null})", "no num_experts_per_tok"},
      {R"(,"num_experts_per_tok":5})", "num_experts_per_tok = 5 exceeds num_local_experts = 4"},
      {R"(,"num_local_experts":0})", "num_local_experts = 0: expected a positive integer"},
      {R"(,"num_experts_per_tok":1.5})", "num_experts_per_tok = 1.5: expected a positive integer"},
      {R"(,"sliding_window":-1})", "sliding_window = -1: expected a positive integer"},
      {R"(,"hidden_act":"gelu"})", "hidden_act = \"gelu\""},
      {R"(,"rope_scaling":{"rope_type":"linear","factor":2.0}})", "rope_scaling is set"},
  };
  for (const auto& [extra, message] : refused) {
    CAPTURE(extra);
    CHECK_THROWS_WITH(checkpoint::read_hf_llama_config(write(dir, base + extra), mixtral_preset()),
                      Contains(message) && Contains("config.json"));
  }
  // Without them at all (MixtralConfig would take Mixtral-8x7B's 8 and 2).
  const std::string bare = R"({"model_type":"mixtral","num_hidden_layers":1,"hidden_size":32,"num_attention_heads":8,)"
                           R"("intermediate_size":24,"vocab_size":5})";
  CHECK_THROWS_WITH(checkpoint::read_hf_llama_config(write(dir, bare), mixtral_preset()),
                    Contains("no num_local_experts") && Contains("model.experts"));
  // A Llama folder for a mixtral deck, and the other way.
  CHECK_THROWS_WITH(checkpoint::read_hf_llama_config(write(dir, R"({"model_type":"llama"})"), mixtral_preset()),
                    Contains("model_type is \"llama\"") && Contains("MixtralForCausalLM"));
  model::GptShape llama = s;
  static_cast<model::BlockSpec&>(llama) = model::block_preset("llama")->spec;
  CHECK_THROWS_WITH(checkpoint::read_hf_llama_config(write(dir, text), checkpoint::hf_preset_of(llama)),
                    Contains("model_type is \"mixtral\""));
  // A llama file's fields are read as before: a stray num_local_experts is not Llama's.
  const checkpoint::HfLlamaConfig l = checkpoint::read_hf_llama_config(
      write(dir, R"({"model_type":"llama","num_hidden_layers":1,"hidden_size":8,"num_attention_heads":2,)"
                 R"("intermediate_size":24,"vocab_size":5,"num_local_experts":"x","sliding_window":0})"),
      checkpoint::hf_preset_of(llama));
  CHECK(l.experts == 0);
  CHECK(l.kv_heads == 2);
}
